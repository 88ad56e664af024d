package testenv

// JavaMurmur2 is org.apache.kafka.common.utils.Utils.murmur2 transcribed
// with Java's int arithmetic (>>> as an unsigned shift), independent of
// franz-go's implementation.
func JavaMurmur2(data []byte) int32 {
	length := int32(len(data))
	const seed = int32(-1756908916) // 0x9747b28c
	const m int32 = 0x5bd1e995
	const r = 24
	h := seed ^ length
	length4 := length / 4
	for i := int32(0); i < length4; i++ {
		i4 := i * 4
		k := int32(data[i4+0]) + int32(data[i4+1])<<8 + int32(data[i4+2])<<16 + int32(data[i4+3])<<24
		k *= m
		k ^= int32(uint32(k) >> r)
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length % 4 {
	case 3:
		h ^= int32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= int32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= int32(data[tail])
		h *= m
	}
	h ^= int32(uint32(h) >> 13)
	h *= m
	h ^= int32(uint32(h) >> 15)
	return h
}

// JavaPartition is the Java producer's partition of a keyed record:
// Utils.toPositive(Utils.murmur2(key)) % numPartitions.
func JavaPartition(key []byte, n int32) int32 {
	return (JavaMurmur2(key) & 0x7fffffff) % n
}
