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
