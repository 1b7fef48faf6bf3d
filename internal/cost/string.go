package cost

import (
	"strconv"
	"strings"
	"time"
)

// String renders the configuration by value, every override dereferenced,
// so two equal configurations print the same whatever their pointers: the
// gateway keys its shared compilers (and their caches) by the options they
// were built with, and a key holding addresses would change on every
// reload.
func (c Config) String() string {
	var b strings.Builder
	b.WriteString("{Off:")
	b.WriteString(strconv.FormatBool(c.Off))
	b.WriteString(" BytesPerToken:")
	b.WriteString(strconv.FormatFloat(c.BytesPerToken, 'g', -1, 64))
	b.WriteString(" MaxHorizon:")
	b.WriteString(strconv.Itoa(c.MaxHorizon))
	b.WriteString(" LeaseMinChars:")
	b.WriteString(strconv.Itoa(c.LeaseMinChars))
	for _, f := range Families {
		b.WriteByte(' ')
		b.WriteString(string(f))
		b.WriteByte(':')
		b.WriteString(c.overrides(f).String())
	}
	b.WriteByte('}')
	return b.String()
}

// String renders the overrides that are set, by value (see Config.String).
func (o Overrides) String() string {
	var parts []string
	float := func(name string, v *float64) {
		if v != nil {
			parts = append(parts, name+"="+strconv.FormatFloat(*v, 'g', -1, 64))
		}
	}
	integer := func(name string, v *int) {
		if v != nil {
			parts = append(parts, name+"="+strconv.Itoa(*v))
		}
	}
	float("cache_read", o.CacheRead)
	float("cache_write", o.CacheWrite)
	float("cache_write_1h", o.CacheWrite1h)
	integer("min_prefix", o.MinPrefix)
	integer("granularity", o.Granularity)
	if o.TTL != nil {
		parts = append(parts, "ttl="+time.Duration(*o.TTL).String())
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// Families are the provider families, in a fixed order.
var Families = []Family{Anthropic, OpenAI, Other, Gemini}

// SetOverrides replaces the overrides of family f; it reports false for a
// family that is not one of Families.
func (c *Config) SetOverrides(f Family, o Overrides) bool {
	switch f {
	case Anthropic:
		c.Anthropic = o
	case OpenAI:
		c.OpenAI = o
	case Other:
		c.Other = o
	case Gemini:
		c.Gemini = o
	default:
		return false
	}
	return true
}
