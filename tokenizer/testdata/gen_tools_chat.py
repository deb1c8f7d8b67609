# Renders testdata/qwen3_tools_chat.json with Python Jinja2 configured as
# transformers configures it (trim_blocks, lstrip_blocks, loopcontrols, its
# tojson). Run from this directory: python3 gen_tools_chat.py
import json, jinja2, jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
cfg = json.load(open('../../testdata/qwen3-tokenizer/tokenizer_config.json'))
def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters['tojson'] = tojson
t = env.from_string(cfg['chat_template'])
tools = [{"type": "function", "function": {"name": "get_weather", "description": "Météo <now> & 'quotes'", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7.5, "default": 1e-06}, "unit": {"enum": ["°C", "°F", None, True]}}, "required": ["city"]}}}]
msgs = [
 {"role": "system", "content": "Be brief."},
 {"role": "user", "content": "Weather in Paris?"},
 {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}, {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Lyon\"}"}}]},
 {"role": "tool", "content": "{\"temp\": 21}"},
 {"role": "tool", "content": "{\"temp\": 19}"},
 {"role": "assistant", "content": "<think>\nhm\n</think>\n\nSunny, 21C."},
 {"role": "user", "content": "<tool_response>x</tool_response>"},
]
cases = []
for et in [True, False]:
    p = t.render(messages=msgs, tools=tools, add_generation_prompt=True, enable_thinking=et, bos_token=None, eos_token='<|im_end|>')
    cases.append({"messages": msgs, "tools": tools, "enable_thinking": et, "prompt": p})
json.dump(cases, open('qwen3_tools_chat.json', 'w'), ensure_ascii=False, indent=1)

