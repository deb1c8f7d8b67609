package data

import (
	"bufio"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/data/web.parquet from web.jsonl")

// TestWriteExampleFixtures regenerates the Parquet file of
// configs/data/example.yaml: go test ./data -run DataWriteExampleFixtures -update
func TestDataWriteExampleFixtures(t *testing.T) {
	if !*update {
		t.Skip("run with -update to rewrite the example fixtures")
	}
	f, err := os.Open("../testdata/data/web.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rows []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r map[string]any
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatal(err)
		}
		// The Parquet copy holds the same texts reversed in order, so that
		// the example's two text files differ.
		rows = append([]map[string]any{r}, rows...)
	}
	writeParquet(t, "../testdata/data/web.parquet", textSchema, rows)
}
