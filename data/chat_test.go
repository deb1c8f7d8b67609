package data

import (
	"strings"
	"testing"

	"dllm/tokenizer"
)

// markup decodes a document with its loss-ON runs wrapped in ⟦…⟧.
func markup(tok *tokenizer.Tokenizer, d doc) string {
	var b strings.Builder
	ids := make([]int, 0, len(d.tokens))
	on := false
	flush := func() {
		if len(ids) == 0 {
			return
		}
		text := tok.Decode(ids, false)
		if on {
			text = "⟦" + text + "⟧"
		}
		b.WriteString(text)
		ids = ids[:0]
	}
	for i, id := range d.tokens {
		o := d.loss == nil || d.loss[i]
		if o != on {
			flush()
			on = o
		}
		ids = append(ids, int(id))
	}
	flush()
	return b.String()
}

func chatEncoder(t testing.TB, tok *tokenizer.Tokenizer, thinking *bool, split bool) *encoder {
	t.Helper()
	sep, ok := tok.TokenID("<|endoftext|>")
	if !ok {
		t.Fatal("no <|endoftext|>")
	}
	return &encoder{tok: tok, sep: uint32(sep), bos: -1, chat: &chatRenderer{tok: tok, thinking: thinking, eot: "<|im_end|>", split: split}}
}

const (
	sysUserAssistant = `[{"role":"system","content":"Be brief."},{"role":"user","content":"What is 2+2?"},{"role":"assistant","content":"4","reasoning_content":"Add them."}]`
	twoTurns         = `[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello","reasoning_content":"Greet."},{"role":"user","content":"Bye"},{"role":"assistant","content":"See you","reasoning_content":"Farewell."}]`
)

// The expectations are written out by hand from Qwen3's template: the
// assistant's reasoning, answer and closing <|im_end|> are targets; the
// system and user turns, the "<|im_start|>assistant\n" opening, the
// newline after <|im_end|> and the separator are not.
func TestDataChatLossMask(t *testing.T) {
	f := false
	cases := []struct {
		name     string
		messages string
		thinking *bool
		split    bool
		want     []string // one marked-up document each
		stats    chatStats
		skip     string
	}{
		{
			name:     "system user assistant with reasoning",
			messages: sysUserAssistant,
			split:    true,
			want: []string{"<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n" +
				"⟦<think>\nAdd them.\n</think>\n\n4<|im_end|>⟧\n<|endoftext|>"},
			stats: chatStats{turns: 1},
		},
		{
			name:     "reasoning written inline in content",
			messages: `[{"role":"user","content":"Hi"},{"role":"assistant","content":"<think>\nWave.\n</think>\n\nHello"}]`,
			split:    true,
			want:     []string{"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n⟦<think>\nWave.\n</think>\n\nHello<|im_end|>⟧\n<|endoftext|>"},
			stats:    chatStats{turns: 1},
		},
		{
			// Qwen3 drops the reasoning of turns before the last user
			// message, so the first turn is trained in its own document,
			// rendered as it is generated (with its reasoning).
			name:     "multi-turn reasoning splits",
			messages: twoTurns,
			split:    true,
			want: []string{
				"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n⟦<think>\nFarewell.\n</think>\n\nSee you<|im_end|>⟧\n<|endoftext|>",
				"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n⟦<think>\nGreet.\n</think>\n\nHello<|im_end|>⟧\n<|endoftext|>",
			},
			stats: chatStats{turns: 2, split: 1},
		},
		{
			name:     "multi-turn without splitting keeps history as context",
			messages: twoTurns,
			split:    false,
			want: []string{
				"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n⟦<think>\nFarewell.\n</think>\n\nSee you<|im_end|>⟧\n<|endoftext|>",
			},
			stats: chatStats{turns: 1, unmasked: 1},
		},
		{
			// With thinking off the empty think block belongs to the
			// prompt, as at inference.
			name:     "thinking disabled",
			messages: `[{"role":"user","content":"What is 2+2?"},{"role":"assistant","content":"4"}]`,
			thinking: &f,
			split:    true,
			want:     []string{"<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n⟦4<|im_end|>⟧\n<|endoftext|>"},
			stats:    chatStats{turns: 1},
		},
		{
			name:     "tool turn and text parts stay off",
			messages: `[{"role":"user","content":[{"type":"text","text":"Weather?"}]},{"role":"assistant","content":"Checking."},{"role":"tool","content":"sunny"},{"role":"assistant","content":"Sunny."}]`,
			split:    true,
			// Within one query Qwen3 renders a turn without its think
			// block once a tool result follows, so that turn is split too.
			want: []string{
				"<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\nChecking.<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n⟦<think>\n\n</think>\n\nSunny.<|im_end|>⟧\n<|endoftext|>",
				"<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n⟦<think>\n\n</think>\n\nChecking.<|im_end|>⟧\n<|endoftext|>",
			},
			stats: chatStats{turns: 2, split: 1},
		},
		{
			name:     "messages after the last assistant turn are dropped",
			messages: `[{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},{"role":"user","content":"unanswered"}]`,
			split:    true,
			want:     []string{"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n⟦<think>\n\n</think>\n\nHello<|im_end|>⟧\n<|endoftext|>"},
			stats:    chatStats{turns: 1},
		},
		{name: "no assistant", messages: `[{"role":"user","content":"Hi"}]`, skip: skipNoAssistant},
		{name: "not JSON", messages: `[{"role":`, skip: skipChatError},
		{name: "no role", messages: `[{"content":"Hi"}]`, skip: skipChatError},
	}
	tok := tiny(t)
	src := &SourceConfig{Kind: KindChat}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			it := chatEncoder(t, tok, c.thinking, c.split).encode(src, rawRecord{value: c.messages})
			if c.skip != "" {
				if it.skips[c.skip] != 1 || len(it.docs) != 0 {
					t.Fatalf("skips %v docs %d, want one %s", it.skips, len(it.docs), c.skip)
				}
				return
			}
			if len(it.docs) != len(c.want) {
				t.Fatalf("%d documents, want %d (skips %v, err %s)", len(it.docs), len(c.want), it.skips, it.err)
			}
			for i, d := range it.docs {
				if got := markup(tok, d); got != c.want[i] {
					t.Errorf("doc %d:\n got %q\nwant %q", i, got, c.want[i])
				}
			}
			if it.chat != c.stats {
				t.Errorf("stats %+v, want %+v", it.chat, c.stats)
			}
		})
	}
}

// TestChatLossMaskTokenBoundaries pins the mask at the token level on the
// tiny tokenizer: the targets run from <think> (id 3) to <|im_end|> (id 1).
func TestDataChatLossMaskTokenBoundaries(t *testing.T) {
	tok := tiny(t)
	it := chatEncoder(t, tok, nil, true).encode(&SourceConfig{Kind: KindChat}, rawRecord{value: sysUserAssistant})
	d := it.docs[0]
	first, last := -1, -1
	for i, on := range d.loss {
		if on {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if d.tokens[first] != 3 || d.tokens[last] != 1 {
		t.Fatalf("targets run from id %d to id %d, want 3 (<think>) to 1 (<|im_end|>)", d.tokens[first], d.tokens[last])
	}
	for i := first; i <= last; i++ {
		if !d.loss[i] {
			t.Fatalf("target span has a hole at %d", i)
		}
	}
	if d.tokens[first-1] != uint32(mustID(t, tok, "\n")) || d.tokens[last+1] != uint32(mustID(t, tok, "\n")) {
		t.Errorf("the span should sit between the newline after 'assistant' and the newline after <|im_end|>")
	}
	// Segment-wise encoding matches encoding the whole rendering here.
	whole := tok.Encode(tok.Decode(toInts(d.tokens[:len(d.tokens)-1]), false))
	if len(whole) != len(d.tokens)-1 {
		t.Errorf("segment-wise encoding has %d tokens, whole %d", len(d.tokens)-1, len(whole))
	}
}

// Qwen3's real tokenizer: the same structure, on the real vocabulary.
func TestDataChatLossMaskQwen3(t *testing.T) {
	tok, err := tokenizer.Load(qwenTokenizerDir(t))
	if err != nil {
		t.Fatal(err)
	}
	enc := chatEncoder(t, tok, nil, true)
	it := enc.encode(&SourceConfig{Kind: KindChat}, rawRecord{value: twoTurns})
	want := []string{
		"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n⟦<think>\nFarewell.\n</think>\n\nSee you<|im_end|>⟧\n<|endoftext|>",
		"<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n⟦<think>\nGreet.\n</think>\n\nHello<|im_end|>⟧\n<|endoftext|>",
	}
	if len(it.docs) != 2 {
		t.Fatalf("%d docs (%v %s)", len(it.docs), it.skips, it.err)
	}
	for i, d := range it.docs {
		if got := markup(tok, d); got != want[i] {
			t.Errorf("doc %d:\n got %q\nwant %q", i, got, want[i])
		}
	}
	think, _ := tok.TokenID("<think>")
	end, _ := tok.TokenID("<|im_end|>")
	d := it.docs[1]
	var on []uint32
	for i, o := range d.loss {
		if o {
			on = append(on, d.tokens[i])
		}
	}
	if on[0] != uint32(think) || on[len(on)-1] != uint32(end) {
		t.Errorf("targets %v: want <think> (%d) first and <|im_end|> (%d) last", on, think, end)
	}
}

func mustID(t testing.TB, tok *tokenizer.Tokenizer, s string) int {
	t.Helper()
	ids := tok.Encode(s)
	if len(ids) != 1 {
		t.Fatalf("%q is %d tokens", s, len(ids))
	}
	return ids[0]
}

func toInts(v []uint32) []int {
	out := make([]int, len(v))
	for i, x := range v {
		out[i] = int(x)
	}
	return out
}
