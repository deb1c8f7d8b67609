package eval

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
)

// Stat is a mean over runs with its sample standard deviation (0 for one
// run) and the number of runs it covers.
type Stat struct {
	Mean float64 `json:"mean"`
	SD   float64 `json:"sd"`
	N    int     `json:"n"`
}

func (s Stat) String() string {
	if s.N == 0 {
		return "-"
	}
	if s.N == 1 {
		return fmt.Sprintf("%.3g", s.Mean)
	}
	return fmt.Sprintf("%.3g ± %.2g", s.Mean, s.SD)
}

func stat(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	m := sum / float64(len(xs))
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	sd := 0.0
	if len(xs) > 1 {
		sd = math.Sqrt(ss / float64(len(xs)-1))
	}
	return Stat{Mean: m, SD: sd, N: len(xs)}
}

// TaskStats summarises one task over runs.
type TaskStats struct {
	Task       string `json:"task"`
	Accuracy   Stat   `json:"accuracy"`
	Normalized Stat   `json:"normalized"`
	TPF        Stat   `json:"tpf"`
	// Acceptance is verify decoding's share of checked tokens kept
	// (N 0 for runs without it).
	Acceptance Stat `json:"acceptance"`
	// NoAnswer is the share of replies without an extractable answer.
	NoAnswer Stat `json:"no_answer"`
}

// Summary is several runs of the same eval (seeds of a recipe, say)
// summarised task by task, and their mean normalised scores.
type Summary struct {
	Runs           int         `json:"runs"`
	Tasks          []TaskStats `json:"tasks"`
	Overall        TaskStats   `json:"overall"`
	MeanNormalized Stat        `json:"mean_normalized"`
	// MinTaskNormalized is each run's worst task, over runs.
	MinTaskNormalized Stat `json:"min_task_normalized"`
}

// Summarize takes reports of the same items (runs with other seeds) and
// gives each task's mean and spread over them; the normalised figures need
// reports compared to their baselines (CompareTo).
func Summarize(reports []*Report) *Summary {
	s := &Summary{Runs: len(reports)}
	type acc struct{ accuracy, normalized, tpf, acceptance, noAnswer []float64 }
	by := map[string]*acc{}
	var order []string
	collect := func(t *TaskSummary) {
		a, ok := by[t.Task]
		if !ok {
			a = &acc{}
			by[t.Task] = a
			if t.Task != "all" {
				order = append(order, t.Task)
			}
		}
		a.accuracy = append(a.accuracy, t.Accuracy)
		if t.Normalized != nil {
			a.normalized = append(a.normalized, *t.Normalized)
		}
		if t.TPF != nil {
			a.tpf = append(a.tpf, *t.TPF)
		}
		if t.Acceptance != nil {
			a.acceptance = append(a.acceptance, *t.Acceptance)
		}
		a.noAnswer = append(a.noAnswer, float64(t.NoAnswer)/float64(max(t.N, 1)))
	}
	var means, mins []float64
	for _, r := range reports {
		worst := math.Inf(1)
		for i := range r.Tasks {
			collect(&r.Tasks[i])
			if n := r.Tasks[i].Normalized; n != nil {
				worst = math.Min(worst, *n)
			}
		}
		collect(&r.Overall)
		if r.MeanNormalized != nil {
			means = append(means, *r.MeanNormalized)
			mins = append(mins, worst)
		}
	}
	stats := func(name string) TaskStats {
		a := by[name]
		return TaskStats{Task: name, Accuracy: stat(a.accuracy), Normalized: stat(a.normalized), TPF: stat(a.tpf),
			Acceptance: stat(a.acceptance), NoAnswer: stat(a.noAnswer)}
	}
	for _, name := range order {
		s.Tasks = append(s.Tasks, stats(name))
	}
	if _, ok := by["all"]; ok {
		s.Overall = stats("all")
	}
	s.MeanNormalized, s.MinTaskNormalized = stat(means), stat(mins)
	return s
}

// PrintTable writes a row per task: means ± standard deviations over runs.
func (s *Summary) PrintTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	verified := s.Overall.Acceptance.N > 0
	head := "task\taccuracy\tnormalised\tTPF\tno answer\t"
	if verified {
		head += "accepted\t"
	}
	fmt.Fprintln(tw, head)
	for _, t := range append(s.Tasks, s.Overall) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t", t.Task, t.Accuracy, t.Normalized, t.TPF, t.NoAnswer)
		if verified {
			fmt.Fprintf(tw, "%s\t", t.Acceptance)
		}
		fmt.Fprintln(tw)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d runs; mean normalised score %s (worst task per run %s)\n", s.Runs, s.MeanNormalized, s.MinTaskNormalized)
}

// Shortfall is a task whose accuracy is under a gate in one report.
type Shortfall struct {
	Report   int // the report's index
	Task     string
	Accuracy float64
}

// BelowGate lists, report by report, the tasks (not the "all" row) whose
// accuracy is under gate. A teacher has to know every task before a
// conversion is scored against it: near chance the normalised score is
// noise.
func BelowGate(reports []*Report, gate float64) []Shortfall {
	var out []Shortfall
	for i, r := range reports {
		for _, t := range r.Tasks {
			if t.Accuracy < gate {
				out = append(out, Shortfall{Report: i, Task: t.Task, Accuracy: t.Accuracy})
			}
		}
	}
	return out
}
