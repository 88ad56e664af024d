//go:build jsonbench && goexperiment.jsonv2

package event

import jsonv2 "encoding/json/v2"

// encoding/json/v2 is still behind GOEXPERIMENT=jsonv2 in Go 1.26, so it is
// measured for reference only and cannot be adopted yet.
func init() {
	jsonCandidates = append(jsonCandidates, jsonCandidate{"encoding_json_v2", func(b []byte, v any) error {
		return jsonv2.Unmarshal(b, v)
	}})
}
