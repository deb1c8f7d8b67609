package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// stubProxy stands in for scripts/proxy.sh under scripts/proxy-seeds.sh:
// a teacher's run writes its dev and held-out results (word problems at
// the accuracy that WORD_<seed> gives; 1 elsewhere), and every run is
// logged to calls.txt.
const stubProxy = `#!/usr/bin/env bash
set -eu
mkdir -p "$PROXY_OUT"
echo "$PROXY_OUT DIFF_RUN=$DIFF_RUN" >>"$(dirname "$0")/../calls.txt"
[ "$DIFF_RUN" = none ] || exit 0
seed=$(sed -n 's/.*seed=\([0-9]*\).*/\1/p' <<<"$TEACHER_SET")
word=WORD_$seed
for split in dev heldout; do
	printf '{"tasks":[{"task":"sum","n":100,"accuracy":1},{"task":"word","n":100,"accuracy":%s}],"overall":{"task":"all","n":200,"accuracy":0.9}}\n' "${!word}" >"$PROXY_OUT/teacher-$split.json"
done
`

// TestProxySeedsGate: the teachers that miss the gate on a family of the
// dev split are left out of the conversions, each with the reason; when
// none passes the script stops with a clear message; GATE=0 takes them all.
func TestProxySeedsGate(t *testing.T) {
	repo := scriptRoot(t)
	for _, tc := range []struct {
		name      string
		env       []string
		converted []string // teacher seeds whose diffusion runs were started
		say       string
		fail      bool
	}{
		{"one under", []string{"WORD_0=0.95", "WORD_1=0.86"}, []string{"t0"},
			"teacher seed 1 is left out: under the gate of 0.9: word 0.86", false},
		{"none passes", []string{"WORD_0=0.5", "WORD_1=0.86"}, nil,
			"no teacher passes the gate (0.9 on every family of the dev split)", true},
		{"no gate", []string{"WORD_0=0.5", "WORD_1=0.86", "GATE=0"}, []string{"t0", "t1"}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.MkdirAll(filepath.Join(root, "scripts"), 0o755); err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile(filepath.Join(repo, "scripts", "proxy-seeds.sh"))
			if err != nil {
				t.Fatal(err)
			}
			for name, body := range map[string]string{"proxy-seeds.sh": string(src), "proxy.sh": stubProxy} {
				if err := os.WriteFile(filepath.Join(root, "scripts", name), []byte(body), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Symlink(filepath.Join(repo, "bin"), filepath.Join(root, "bin")); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "scripts/proxy-seeds.sh")
			cmd.Dir = root
			cmd.Env = append(append(os.Environ(), "SEEDS=0 1", "DIFF_SEEDS=1", "BUDGETS=5", "STAGES=teachers diffusion"), tc.env...)
			b, err := cmd.CombinedOutput()
			out := string(b)
			if (err != nil) != tc.fail {
				t.Fatalf("error %v, want failure %v:\n%s", err, tc.fail, out)
			}
			if !strings.Contains(out, tc.say) {
				t.Errorf("output lacks %q:\n%s", tc.say, out)
			}
			calls, _ := os.ReadFile(filepath.Join(root, "calls.txt"))
			var converted []string
			for _, line := range strings.Split(strings.TrimSpace(string(calls)), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[1] != "DIFF_RUN=none" {
					converted = append(converted, filepath.Base(f[0]))
				}
			}
			if strings.Join(converted, " ") != strings.Join(tc.converted, " ") {
				t.Errorf("converted teachers %v, want %v:\n%s", converted, tc.converted, out)
			}
		})
	}
}
