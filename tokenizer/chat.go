package tokenizer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nikolalohinski/gonja/v2/builtins"
	"github.com/nikolalohinski/gonja/v2/config"
	"github.com/nikolalohinski/gonja/v2/exec"
	"github.com/nikolalohinski/gonja/v2/loaders"
)

// defaultTemplate and toolTemplate are the names transformers picks from a
// list of named chat templates.
const (
	defaultTemplate = "default"
	toolTemplate    = "tool_use"
)

// ChatRequest is one conversation to render through the checkpoint's chat
// template.
type ChatRequest struct {
	// Messages is a JSON array of {"role", "content", ...}; content is a
	// string or a list of {"type": "text", "text": ...} parts, which are
	// joined with newlines as vLLM does for string-content templates.
	// Other fields (tool_calls, reasoning_content, ...) pass through.
	Messages json.RawMessage
	// Tools is an optional JSON array of tool definitions.
	Tools json.RawMessage
	// AddGenerationPrompt appends the assistant turn's opening.
	AddGenerationPrompt bool
	// EnableThinking, when set, defines enable_thinking; left nil the
	// variable is undefined and the template's default applies.
	EnableThinking *bool
	// Kwargs are further template variables (chat_template_kwargs).
	Kwargs map[string]any
}

// chatTemplates holds a checkpoint's templates by name. A template that
// gonja cannot parse is kept as its error, so that a tokenizer stays usable
// for encoding and the error surfaces when a chat is rendered.
type chatTemplates struct {
	source map[string]string
	parsed map[string]*exec.Template
	errs   map[string]error
}

// chatEnv is transformers' Jinja environment as far as templates need it.
var chatEnv = func() *exec.Environment {
	filters := exec.NewFilterSet(map[string]exec.FilterFunction{}).Update(builtins.Filters)
	_ = filters.Replace("tojson", toJSONFilter)
	globals := exec.EmptyContext().Update(builtins.GlobalFunctions).Update(builtins.GlobalVariables)
	globals.Set("raise_exception", func(_ *exec.Evaluator, params *exec.VarArgs) *exec.Value {
		msg := "raise_exception called"
		if len(params.Args) > 0 {
			msg = params.Args[0].String()
		}
		return exec.AsValue(fmt.Errorf("template raised: %s", msg))
	})
	globals.Set("strftime_now", func(_ *exec.Evaluator, params *exec.VarArgs) *exec.Value {
		if len(params.Args) != 1 {
			return exec.AsValue(errors.New("strftime_now takes one format argument"))
		}
		return exec.AsValue(strftime(time.Now(), params.Args[0].String()))
	})
	return &exec.Environment{
		Context:           globals,
		Filters:           filters,
		Tests:             builtins.Tests,
		ControlStructures: builtins.ControlStructures,
		Methods:           builtins.Methods,
	}
}()

func newChatTemplates(sources map[string]string) (*chatTemplates, error) {
	c := &chatTemplates{source: sources, parsed: map[string]*exec.Template{}, errs: map[string]error{}}
	cfg := config.New()
	// transformers renders with trim_blocks and lstrip_blocks.
	cfg.TrimBlocks = true
	cfg.LeftStripBlocks = true
	for name, src := range sources {
		tpl, err := parseTemplate(name, cfg, &noFiles{name: name, src: src})
		if err != nil {
			// gonja wraps the parser error in a message quoting the whole
			// template; the inner error has the position.
			if inner := errors.Unwrap(err); inner != nil {
				err = inner
			}
			c.errs[name] = templateError(name, src, err)
			continue
		}
		c.parsed[name] = tpl
	}
	return c, nil
}

// errTemplateFiles is what include, import, from and extends meet.
var errTemplateFiles = errors.New("chat templates cannot include, import or extend other templates or files")

// noFiles is the only loader a chat template gets: it hands gonja the
// template's own source once, to parse it, and refuses every other name.
// A chat template comes with a downloaded checkpoint and its variables come
// from requests (chat_template_kwargs), so a file loader would let either
// read any file the server can (`{% include '/etc/passwd' %}`). The
// templates HF checkpoints ship are single files, as transformers renders
// them, so nothing real needs one.
type noFiles struct {
	name string
	src  string
	read atomic.Bool
}

// Read returns the template's source the first time it is asked for: gonja
// reads the root template through its loader once, while parsing.
func (l *noFiles) Read(name string) (io.Reader, error) {
	if name == l.name && l.read.CompareAndSwap(false, true) {
		return strings.NewReader(l.src), nil
	}
	return nil, fmt.Errorf("%q: %w", name, errTemplateFiles)
}

// Resolve refuses every name: include and import resolve theirs first.
func (l *noFiles) Resolve(name string) (string, error) {
	return "", fmt.Errorf("%q: %w", name, errTemplateFiles)
}

// Inherit refuses too: it is how an included template would get a loader.
func (l *noFiles) Inherit(name string) (loaders.Loader, error) {
	return nil, fmt.Errorf("%q: %w", name, errTemplateFiles)
}

// parseTemplate is exec.NewTemplate with its panics (gonja has a few on
// odd input) turned into errors.
func parseTemplate(name string, cfg *config.Config, loader loaders.Loader) (tpl *exec.Template, err error) {
	defer recoverTemplate(name, &err)
	return exec.NewTemplate(name, cfg, loader, chatEnv)
}

// recoverTemplate turns a panic inside gonja, parsing or rendering (an
// integer division by zero, for one), into the error of the call that hit
// it, so that a bad template is an error, never a crash of the server or
// of a data run.
func recoverTemplate(name string, err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("tokenizer: chat template %q failed: %v", name, p)
	}
}

// HasChatTemplate reports whether the checkpoint ships a chat template.
func (t *Tokenizer) HasChatTemplate() bool { return len(t.chat.source) > 0 }

// ApplyChatTemplate renders a conversation to the prompt text; encode it
// with Encode (the template writes special tokens such as <|im_start|>).
func (t *Tokenizer) ApplyChatTemplate(req ChatRequest) (_ string, err error) {
	name := defaultTemplate
	if _, ok := t.chat.source[toolTemplate]; ok && hasItems(req.Tools) {
		name = toolTemplate
	}
	src, ok := t.chat.source[name]
	if !ok {
		if len(t.chat.source) == 0 {
			return "", errors.New("tokenizer: checkpoint has no chat template")
		}
		return "", fmt.Errorf("tokenizer: no chat template named %q", name)
	}
	if err := t.chat.errs[name]; err != nil {
		return "", err
	}
	vars, err := t.chatVars(req)
	if err != nil {
		return "", fmt.Errorf("tokenizer: chat: %w", err)
	}
	defer recoverTemplate(name, &err)
	out, err := t.chat.parsed[name].ExecuteToString(exec.NewContext(vars))
	if err != nil {
		return "", templateError(name, src, err)
	}
	return out, nil
}

func hasItems(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null" && s != "[]"
}

// chatVars builds the variables transformers passes to a template.
func (t *Tokenizer) chatVars(req ChatRequest) (map[string]any, error) {
	vars := map[string]any{}
	for k, v := range t.cfg.specialNames {
		vars[k] = v
	}
	for k, v := range req.Kwargs {
		// Round-trip through JSON so that caller values look like
		// request values (ordered dicts, ints, lists) to the template.
		data, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("kwarg %q: %w", k, err)
		}
		if vars[k], err = decodeOrdered(data); err != nil {
			return nil, fmt.Errorf("kwarg %q: %w", k, err)
		}
	}
	if req.EnableThinking != nil {
		vars["enable_thinking"] = *req.EnableThinking
	}
	vars["add_generation_prompt"] = req.AddGenerationPrompt
	messages, err := decodeMessages(req.Messages)
	if err != nil {
		return nil, err
	}
	vars["messages"] = messages
	if hasItems(req.Tools) {
		tools, err := decodeOrdered(req.Tools)
		if err != nil {
			return nil, fmt.Errorf("tools: %w", err)
		}
		if _, ok := tools.([]any); !ok {
			return nil, errors.New("tools: want a JSON array")
		}
		vars["tools"] = tools
	}
	return vars, nil
}

// decodeMessages decodes the message list and flattens text-part content.
func decodeMessages(raw json.RawMessage) ([]any, error) {
	if !hasItems(raw) {
		return nil, errors.New("messages: empty")
	}
	v, err := decodeOrdered(raw)
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	list, ok := v.([]any)
	if !ok {
		return nil, errors.New("messages: want a JSON array")
	}
	for i, m := range list {
		msg, ok := m.(*exec.Dict)
		if !ok {
			return nil, fmt.Errorf("messages[%d]: want an object", i)
		}
		for _, p := range msg.Pairs {
			if p.Key.String() != "content" || !p.Value.IsList() {
				continue
			}
			text, err := joinTextParts(p.Value)
			if err != nil {
				return nil, fmt.Errorf("messages[%d].content: %w", i, err)
			}
			p.Value = exec.AsValue(text)
		}
	}
	return list, nil
}

func joinTextParts(parts *exec.Value) (string, error) {
	var texts []string
	var err error
	parts.Iterate(func(i, _ int, part, _ *exec.Value) bool {
		typ, _ := part.GetItem("type")
		text, ok := part.GetItem("text")
		if typ.String() != "text" || !ok || !text.IsString() {
			err = fmt.Errorf("part %d: only {\"type\": \"text\", \"text\": ...} parts are supported", i)
			return false
		}
		texts = append(texts, text.String())
		return true
	}, func() {})
	return strings.Join(texts, "\n"), err
}

// linePattern finds the template line gonja reports in its errors.
var linePattern = regexp.MustCompile(`(?:Line: |at line )(\d+)`)

// templateError names the template and quotes the line an error points
// at, so that an unsupported construct is easy to find.
func templateError(name, src string, err error) error {
	if m := linePattern.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		if lines := strings.Split(src, "\n"); n >= 1 && n <= len(lines) {
			return fmt.Errorf("tokenizer: chat template %q line %d `%s`: %w", name, n, strings.TrimSpace(lines[n-1]), err)
		}
	}
	return fmt.Errorf("tokenizer: chat template %q: %w", name, err)
}
