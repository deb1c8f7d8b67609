package eval

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"text/tabwriter"
	"time"
)

// TaskSummary is the score of one task (or of all, under the name "all").
type TaskSummary struct {
	Task     string  `json:"task"`
	N        int     `json:"n"`
	Correct  int     `json:"correct"`
	Accuracy float64 `json:"accuracy"`
	// StdErr is the accuracy's standard error, sqrt(acc*(1-acc)/n): the
	// binomial spread of a score over n items (one run's sampling noise,
	// not the spread over seeds).
	StdErr float64 `json:"stderr"`
	Chance float64 `json:"chance"`
	// Errors counts requests that failed (scored wrong); NoAnswer replies
	// without an extractable answer; Truncated replies cut by max_tokens.
	Errors    int `json:"errors"`
	NoAnswer  int `json:"no_answer"`
	Truncated int `json:"truncated"`
	// Tokens is the completion tokens generated; TokensPerSec divides
	// them by the requests' summed latency (per-request speed; it includes
	// queueing when more requests are in flight than the server runs).
	Tokens       int     `json:"completion_tokens"`
	Seconds      float64 `json:"seconds"`
	TokensPerSec float64 `json:"tokens_per_s"`
	// Steps and TPF come from dllm serve's usage.dllm (model forwards per
	// reply); TPF is null when the server does not report it.
	Steps int      `json:"steps,omitempty"`
	TPF   *float64 `json:"tpf"`
	// Acceptance is, in dllm serve's verify decoding, the share of the
	// drafted tokens checked that were kept (null otherwise).
	Checked    int      `json:"checked,omitempty"`
	Accepted   int      `json:"accepted,omitempty"`
	Acceptance *float64 `json:"acceptance,omitempty"`
	// Normalized is 100*(accuracy-chance)/(baseline-chance) against a
	// baseline report (null without one, or when the baseline is at chance).
	Baseline   *float64 `json:"baseline_accuracy,omitempty"`
	Normalized *float64 `json:"normalized,omitempty"`
}

// Report is the outcome of a run: per task, overall and per item.
type Report struct {
	Server   string         `json:"server,omitempty"`
	Model    string         `json:"model,omitempty"`
	File     string         `json:"file,omitempty"`
	Settings map[string]any `json:"settings,omitempty"`
	Started  time.Time      `json:"started"`
	WallSec  float64        `json:"wall_s"`
	// Throughput is all completion tokens over the wall-clock time.
	Throughput float64       `json:"throughput_tokens_per_s"`
	Tasks      []TaskSummary `json:"tasks"`
	Overall    TaskSummary   `json:"overall"`
	// MeanNormalized averages the tasks' normalised scores (null without
	// a baseline).
	MeanNormalized *float64     `json:"mean_normalized,omitempty"`
	Items          []ItemResult `json:"items"`
}

func newReport(items []Item, results []ItemResult, chance map[string]float64, wall time.Duration) *Report {
	r := &Report{Started: time.Now().Add(-wall).UTC().Truncate(time.Second), WallSec: wall.Seconds(), Items: results}
	idx := map[string]int{}
	for i := range items {
		it, res := &items[i], &results[i]
		k, ok := idx[it.Task]
		if !ok {
			k = len(r.Tasks)
			idx[it.Task] = k
			c, known := chance[it.Task]
			if !known && len(it.Choices) > 0 {
				c = 1 / float64(len(it.Choices))
			}
			r.Tasks = append(r.Tasks, TaskSummary{Task: it.Task, Chance: c})
		}
		add(&r.Tasks[k], res)
		add(&r.Overall, res)
	}
	r.Overall.Task = "all"
	var chanceSum float64
	for i := range r.Tasks {
		finish(&r.Tasks[i])
		chanceSum += r.Tasks[i].Chance * float64(r.Tasks[i].N)
	}
	r.Overall.Chance = chanceSum / float64(max(r.Overall.N, 1))
	finish(&r.Overall)
	r.Throughput = float64(r.Overall.Tokens) / max(wall.Seconds(), 1e-9)
	return r
}

func add(s *TaskSummary, r *ItemResult) {
	s.N++
	switch {
	case r.Error != "":
		s.Errors++
	case !r.Extracted:
		s.NoAnswer++
	}
	if r.Correct {
		s.Correct++
	}
	if r.Finish == "length" {
		s.Truncated++
	}
	s.Tokens += r.Tokens
	s.Seconds += r.Seconds
	s.Steps += r.Steps
	s.Checked += r.Checked
	s.Accepted += r.Accepted
}

func finish(s *TaskSummary) {
	s.Accuracy = float64(s.Correct) / float64(max(s.N, 1))
	s.StdErr = math.Sqrt(s.Accuracy * (1 - s.Accuracy) / float64(max(s.N, 1)))
	s.TokensPerSec = float64(s.Tokens) / max(s.Seconds, 1e-9)
	if s.Steps > 0 {
		t := float64(s.Tokens) / float64(s.Steps)
		s.TPF = &t
	}
	if s.Checked > 0 {
		a := float64(s.Accepted) / float64(s.Checked)
		s.Acceptance = &a
	}
}

// CompareTo fills in the normalised score of every task against a baseline
// report (the AR teacher, say): 100*(acc-chance)/(base-chance), left null
// where the baseline is not above chance.
func (r *Report) CompareTo(base *Report) {
	accs := map[string]float64{}
	for _, t := range base.Tasks {
		accs[t.Task] = t.Accuracy
	}
	var sum float64
	n := 0
	for i := range r.Tasks {
		t := &r.Tasks[i]
		b, ok := accs[t.Task]
		if !ok {
			continue
		}
		t.Baseline = &b
		if b-t.Chance <= 0 {
			continue
		}
		v := 100 * (t.Accuracy - t.Chance) / (b - t.Chance)
		t.Normalized = &v
		sum += v
		n++
	}
	if n > 0 {
		m := sum / float64(n)
		r.MeanNormalized = &m
	}
}

// ClampNormalized limits every task's normalised score to 0..100 and
// recomputes their mean: the benchmarks' convention, where beating the
// AR original earns nothing and falling below chance costs nothing more.
func (r *Report) ClampNormalized() {
	var sum float64
	n := 0
	for i := range r.Tasks {
		if v := r.Tasks[i].Normalized; v != nil {
			*v = min(max(*v, 0), 100)
			sum += *v
			n++
		}
	}
	if n > 0 {
		m := sum / float64(n)
		r.MeanNormalized = &m
	}
}

// ReadReport reads a report written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("eval: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("eval: %s: %w", path, err)
	}
	return &r, nil
}

// WriteJSON writes the report to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("eval: %w", err)
	}
	return nil
}

// PrintTable writes one row per task and one for all of them.
func (r *Report) PrintTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	withBase, verified := false, false
	for _, t := range r.Tasks {
		withBase = withBase || t.Baseline != nil
		verified = verified || t.Acceptance != nil
	}
	head := "task\tn\taccuracy\t±\tchance\ttokens/reply\ttok/s\tTPF\terrors\tno answer\ttruncated\t"
	if withBase {
		head += "baseline\tnormalised\t"
	}
	if verified {
		head += "accepted\t"
	}
	fmt.Fprintln(tw, head)
	row := func(t *TaskSummary) {
		fmt.Fprintf(tw, "%s\t%d\t%.3f\t%.3f\t%.2f\t%.0f\t%.1f\t%s\t%d\t%d\t%d\t", t.Task, t.N, t.Accuracy, t.StdErr, t.Chance, float64(t.Tokens)/float64(max(t.N, 1)), t.TokensPerSec,
			optFloat(t.TPF, "%.2f"), t.Errors, t.NoAnswer, t.Truncated)
		if withBase {
			fmt.Fprintf(tw, "%s\t%s\t", optFloat(t.Baseline, "%.3f"), optFloat(t.Normalized, "%.1f"))
		}
		if verified {
			fmt.Fprintf(tw, "%s\t", optFloat(t.Acceptance, "%.2f"))
		}
		fmt.Fprintln(tw)
	}
	for i := range r.Tasks {
		row(&r.Tasks[i])
	}
	row(&r.Overall)
	tw.Flush()
	if r.MeanNormalized != nil {
		fmt.Fprintf(w, "mean normalised score over tasks: %.1f\n", *r.MeanNormalized)
	}
	fmt.Fprintf(w, "%d requests in %.1f s, %.1f completion tokens/s overall\n", r.Overall.N, r.WallSec, r.Throughput)
}

func optFloat(v *float64, format string) string {
	if v == nil || math.IsNaN(*v) {
		return "-"
	}
	return fmt.Sprintf(format, *v)
}
