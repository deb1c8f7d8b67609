package loadgen

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var ds []time.Duration
		for _, x := range xs {
			ds = append(ds, time.Duration(x)*time.Millisecond)
		}
		return ds
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // unsorted on purpose
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"none", nil, Latency{}},
		{"one", ms(7), Latency{N: 1, P50: 7, P90: 7, P99: 7, Max: 7}},
		{"1..100", ms(hundred...), Latency{N: 100, P50: 51, P90: 91, P99: 100, Max: 100}},
	} {
		if got := summarize(tc.in); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
