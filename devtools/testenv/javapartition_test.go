package testenv

import "testing"

func TestJavaMurmur2MatchesKafka(t *testing.T) {
	// Values printed by Kafka's own Utils.murmur2 (Kafka's UtilsTest and
	// clients that test against it).
	known := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc":   479470107,
		"1":     -1993445489,
		"12":    126087238,
		"123":   -267702483,
		"1234":  -1614185708,
		"12345": -1188365604,
	}
	for key, want := range known {
		if got := JavaMurmur2([]byte(key)); got != want {
			t.Errorf("murmur2(%q) = %d, Kafka says %d", key, got, want)
		}
	}
}
