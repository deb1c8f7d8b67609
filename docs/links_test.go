// Package docs holds the user documentation; its test checks that every
// relative link in it and in the README resolves.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var (
	linkRE    = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	headingRE = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*$`)
	fenceRE   = regexp.MustCompile("(?ms)^```.*?^```")
)

// slug is GitHub's anchor for a heading: lower case, punctuation but
// hyphens and underscores dropped, spaces made hyphens.
func slug(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors are the heading anchors of a markdown file.
func anchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := fenceRE.ReplaceAllString(string(b), "")
	m := map[string]bool{}
	for _, h := range headingRE.FindAllStringSubmatch(text, -1) {
		m[slug(strings.ReplaceAll(h[1], "`", ""))] = true
	}
	return m
}

// Every relative link of README.md and docs/*.md names a file or folder
// of the repository, and a #fragment a heading of that file.
func TestLinksResolve(t *testing.T) {
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../README.md")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := fenceRE.ReplaceAllString(string(b), "")
		for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, frag, _ := strings.Cut(target, "#")
			full := f
			if path != "" {
				full = filepath.Join(filepath.Dir(f), path)
				if _, err := os.Stat(full); err != nil {
					t.Errorf("%s: link %q: no %s", f, target, full)
					continue
				}
			}
			if frag != "" && strings.HasSuffix(full, ".md") && !anchors(t, full)[frag] {
				t.Errorf("%s: link %q: %s has no heading #%s", f, target, full, frag)
			}
		}
	}
}
