package provider

import "strings"

// Tokenizer encodings, as the configuration names them.
const (
	EncodingO200k  = "o200k_base"
	EncodingCL100k = "cl100k_base"
)

// Vendor is who sets a model's prices (the cost model's family).
type Vendor string

const (
	VendorOpenAI    Vendor = "openai"
	VendorAnthropic Vendor = "anthropic"
	VendorOther     Vendor = "other"
	VendorGemini    Vendor = "gemini"
)

// family is one row of the model table: models whose name starts with
// prefix (or, with anywhere, contains it) are of the family label.
type family struct {
	prefix   string
	anywhere bool   // match inside the name (claude-3-5-sonnet, claude-sonnet-4)
	label    string // the metric label
	encoding string // the model's own tokenizer; "" when none is known
	openAI   bool   // priced by OpenAI's rules
}

// families is the one table of model families, most specific first: the
// metric label is the first row that matches, the tokenizer the first
// prefix row that names one, the OpenAI pricing any prefix row marked so.
var families = []family{
	{prefix: "opus", anywhere: true, label: "claude-opus"},
	{prefix: "sonnet", anywhere: true, label: "claude-sonnet"},
	{prefix: "haiku", anywhere: true, label: "claude-haiku"},
	{prefix: "claude", label: "claude"},
	{prefix: "gpt-5", label: "gpt-5", encoding: EncodingO200k, openAI: true},
	{prefix: "gpt-4.1", label: "gpt-4.1", encoding: EncodingO200k, openAI: true},
	{prefix: "gpt-4o", label: "gpt-4o", encoding: EncodingO200k, openAI: true},
	{prefix: "gpt-4.5", label: "gpt-4", encoding: EncodingO200k, openAI: true},
	{prefix: "gpt-4", label: "gpt-4", encoding: EncodingCL100k, openAI: true},
	{prefix: "gpt-3.5", label: "gpt-3.5", encoding: EncodingCL100k, openAI: true},
	{prefix: "gpt-oss", label: "gpt-oss", openAI: true},
	{prefix: "codex", label: "codex"},
	{prefix: "o1", label: "o1", encoding: EncodingO200k, openAI: true},
	{prefix: "o3", label: "o3", encoding: EncodingO200k, openAI: true},
	{prefix: "o4", label: "o4", encoding: EncodingO200k, openAI: true},
	{prefix: "gemini", label: "gemini"},
	{prefix: "llama", anywhere: true, label: "llama"},
	{prefix: "mistral", anywhere: true, label: "mistral"},
	{prefix: "qwen", anywhere: true, label: "qwen"},
	{prefix: "deepseek", anywhere: true, label: "deepseek"},
	// Every other gpt-* and chatgpt-* model is priced as OpenAI's; it has
	// no label or tokenizer of its own.
	{prefix: "gpt-", label: "other", openAI: true},
	{prefix: "chatgpt-", label: "other", openAI: true},
}

// baseName is the model name without a "provider/" prefix ("openai/gpt-4o"
// is gpt-4o), lower case.
func baseName(model string) string {
	m := strings.ToLower(model)
	return m[strings.LastIndexByte(m, '/')+1:]
}

// ModelLabel is the model's family as a bounded metric label (model names
// are unbounded): "unknown" for no model, "other" for one of no family.
// Dates or versions after the family are dropped.
func ModelLabel(model string) string {
	m := baseName(model)
	if m == "" {
		return "unknown"
	}
	for _, f := range families {
		if strings.HasPrefix(m, f.prefix) || (f.anywhere && strings.Contains(m, f.prefix)) {
			return f.label
		}
	}
	return "other"
}

// EncodingOf returns the encoding of model's own tokenizer, "" if none is
// known. A "provider/" prefix and surrounding space are ignored.
func EncodingOf(model string) string {
	m := baseName(strings.TrimSpace(model))
	for _, f := range families {
		if f.encoding != "" && !f.anywhere && strings.HasPrefix(m, f.prefix) {
			return f.encoding
		}
	}
	return ""
}

// VendorOf returns who prices a request of format for model: Anthropic's
// rules for the Anthropic format, OpenAI's for an OpenAI model name as sent
// (no "provider/" prefix), and Other's otherwise.
func VendorOf(format Format, model string) Vendor {
	switch format {
	case Anthropic:
		return VendorAnthropic
	case Gemini:
		return VendorGemini
	}
	for _, f := range families {
		if f.openAI && strings.HasPrefix(model, f.prefix) {
			return VendorOpenAI
		}
	}
	return VendorOther
}

// TokenizerChoices is the list of tokenizer values, for messages.
const TokenizerChoices = "auto, o200k_base, cl100k_base or off"

// KnownTokenizer reports whether v is a tokenizer value: auto (each
// model's own where known), o200k_base, cl100k_base, or off.
func KnownTokenizer(v string) bool {
	switch v {
	case "auto", EncodingO200k, EncodingCL100k, "off":
		return true
	}
	return false
}
