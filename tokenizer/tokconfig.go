package tokenizer

import (
	"encoding/json"
	"fmt"
)

// tokenizerConfig is what this package uses from tokenizer_config.json.
type tokenizerConfig struct {
	BOSToken     string
	EOSToken     string
	AddBOS       bool
	templates    map[string]string // by name; a plain string is "default"
	specialNames map[string]any    // *_token entries, exposed to templates
}

// parseTokenizerConfig reads tokenizer_config.json; empty input is an empty
// config, since a bare tokenizer.json is a valid checkpoint for encoding.
func parseTokenizerConfig(data []byte) (tokenizerConfig, error) {
	cfg := tokenizerConfig{templates: map[string]string{}, specialNames: map[string]any{}}
	if len(data) == 0 {
		return cfg, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return cfg, err
	}
	for _, name := range []string{"bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token", "mask_token"} {
		v, ok := raw[name]
		if !ok || isNull(v) {
			continue
		}
		s, err := tokenContent(v)
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", name, err)
		}
		cfg.specialNames[name] = s
	}
	if v, ok := raw["additional_special_tokens"]; ok && !isNull(v) {
		var list []json.RawMessage
		if err := json.Unmarshal(v, &list); err != nil {
			return cfg, fmt.Errorf("additional_special_tokens: %w", err)
		}
		names := make([]any, 0, len(list))
		for _, item := range list {
			s, err := tokenContent(item)
			if err != nil {
				return cfg, fmt.Errorf("additional_special_tokens: %w", err)
			}
			names = append(names, s)
		}
		cfg.specialNames["additional_special_tokens"] = names
	}
	cfg.BOSToken, _ = cfg.specialNames["bos_token"].(string)
	cfg.EOSToken, _ = cfg.specialNames["eos_token"].(string)
	if v, ok := raw["add_bos_token"]; ok && !isNull(v) {
		if err := json.Unmarshal(v, &cfg.AddBOS); err != nil {
			return cfg, fmt.Errorf("add_bos_token: %w", err)
		}
	}
	if v, ok := raw["chat_template"]; ok && !isNull(v) {
		if err := parseTemplates(v, cfg.templates); err != nil {
			return cfg, fmt.Errorf("chat_template: %w", err)
		}
	}
	return cfg, nil
}

// tokenContent accepts a special token written as a string or as a
// serialized AddedToken object ({"content": ...}).
func tokenContent(v json.RawMessage) (string, error) {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		return s, nil
	}
	var obj struct {
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(v, &obj); err != nil || obj.Content == nil {
		return "", fmt.Errorf("want a string or an object with content, got %s", v)
	}
	return *obj.Content, nil
}

// parseTemplates accepts the string form and the list-of-named-templates
// form ([{"name": ..., "template": ...}]).
func parseTemplates(v json.RawMessage, into map[string]string) error {
	var s string
	if err := json.Unmarshal(v, &s); err == nil {
		into[defaultTemplate] = s
		return nil
	}
	var list []struct {
		Name     string `json:"name"`
		Template string `json:"template"`
	}
	if err := json.Unmarshal(v, &list); err != nil {
		return fmt.Errorf("want a string or a list of {name, template}")
	}
	for _, t := range list {
		into[t.Name] = t.Template
	}
	return nil
}
