package eval

import (
	"math"
	"strings"
	"testing"
)

// TestSummarize: means and sample standard deviations over runs, per task
// and overall, with each run's worst task.
func TestSummarize(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	run := func(a, b, tpf float64) *Report {
		r := &Report{
			Tasks: []TaskSummary{
				{Task: "sum", N: 10, Accuracy: a, Normalized: f(100 * a), TPF: f(tpf), NoAnswer: 1},
				{Task: "sort", N: 10, Accuracy: b, Normalized: f(100 * b), TPF: f(tpf)},
			},
			Overall: TaskSummary{Task: "all", N: 20, Accuracy: (a + b) / 2, TPF: f(tpf)},
		}
		r.MeanNormalized = f(50 * (a + b))
		return r
	}
	s := Summarize([]*Report{run(0.9, 0.7, 2), run(0.8, 0.9, 3), run(1.0, 0.8, 4)})
	near := func(got, want float64) bool { return math.Abs(got-want) < 1e-9 }
	if s.Runs != 3 || len(s.Tasks) != 2 || s.Tasks[0].Task != "sum" || s.Overall.Task != "all" {
		t.Fatalf("summary %+v", s)
	}
	sum := s.Tasks[0]
	if !near(sum.Accuracy.Mean, 0.9) || !near(sum.Accuracy.SD, 0.1) || !near(sum.Normalized.Mean, 90) || !near(sum.TPF.Mean, 3) || !near(sum.TPF.SD, 1) || !near(sum.NoAnswer.Mean, 0.1) {
		t.Errorf("sum: %+v", sum)
	}
	if !near(s.MeanNormalized.Mean, 85) || s.MeanNormalized.N != 3 || !near(s.MinTaskNormalized.Mean, (70+80+80)/3.0) {
		t.Errorf("mean %+v, worst %+v", s.MeanNormalized, s.MinTaskNormalized)
	}
	var b strings.Builder
	s.PrintTable(&b)
	if !strings.Contains(b.String(), "85 ± 5") || !strings.Contains(b.String(), "3 runs") {
		t.Errorf("table:\n%s", b.String())
	}
	if one := Summarize([]*Report{run(0.5, 0.5, 2)}); one.Tasks[0].Accuracy.SD != 0 || one.Tasks[0].Accuracy.String() != "0.5" {
		t.Errorf("one run: %+v", one.Tasks[0])
	}
}

// TestBelowGate: every task under the gate in every report, the "all" row
// left out, and nothing at or above it.
func TestBelowGate(t *testing.T) {
	rep := func(accs ...float64) *Report {
		r := &Report{Overall: TaskSummary{Task: "all", Accuracy: 0.1}}
		for i, a := range accs {
			r.Tasks = append(r.Tasks, TaskSummary{Task: []string{"sum", "word"}[i], Accuracy: a})
		}
		return r
	}
	reports := []*Report{rep(1, 0.9), rep(0.95, 0.86), rep(0.5, 0.89)}
	for _, tc := range []struct {
		gate float64
		want []Shortfall
	}{
		{0.9, []Shortfall{{1, "word", 0.86}, {2, "sum", 0.5}, {2, "word", 0.89}}},
		{0.86, []Shortfall{{2, "sum", 0.5}}},
		{0.5, nil},
		{0, nil},
	} {
		got := BelowGate(reports, tc.gate)
		if len(got) != len(tc.want) {
			t.Errorf("gate %g: %+v, want %+v", tc.gate, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("gate %g: %+v, want %+v", tc.gate, got, tc.want)
			}
		}
	}
}
