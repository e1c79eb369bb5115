package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// Bounds of what schema validation reports: messages go into the policy input, the decision
// log and the model's context.
const (
	maxSchemaErrors  = 5   // errors kept per validation
	maxSchemaMessage = 160 // bytes per error message
)

// schemas are a tool's compiled input and output schemas. They are compiled on the first call
// of the tool in a catalog, once: a new build or a changed tool list makes a new catalog.
type schemas struct {
	once      sync.Once
	in, out   *jsonschema.Schema
	inErr     error // the input schema does not compile: every call is refused
	outErr    error // the output schema does not compile: every result is an error
	hasOutput bool
}

// compiled returns the tool's schemas, compiling them on first use.
func (e *exposed) compiled() *schemas {
	s := &e.schemas
	s.once.Do(func() {
		var tool struct {
			InputSchema  json.RawMessage `json:"inputSchema"`
			OutputSchema json.RawMessage `json:"outputSchema"`
		}
		json.Unmarshal(e.Raw, &tool)
		if len(tool.InputSchema) == 0 || string(tool.InputSchema) == "null" {
			// MCP requires an inputSchema; a server that omits it gets no checking.
			tool.InputSchema = json.RawMessage(`{"type":"object"}`)
		}
		s.in, s.inErr = compileSchema(tool.InputSchema)
		if len(tool.OutputSchema) > 0 && string(tool.OutputSchema) != "null" {
			s.hasOutput = true
			s.out, s.outErr = compileSchema(tool.OutputSchema)
		}
	})
	return s
}

// compileSchema compiles one JSON Schema (draft 2020-12 unless it says otherwise, as MCP
// specifies). Nothing is fetched: a $ref outside the schema does not compile.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const url = "lush://tool/schema.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// noLoader refuses every external schema: a tool's schema must be self-contained.
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %s is not loaded", bounded(url, 80))
}

// checkArguments validates a call's arguments (absent arguments are {}) against the tool's
// input schema. It returns nil when they match, else the errors (at least one).
func (s *schemas) checkArguments(raw json.RawMessage) []string {
	if s.inErr != nil {
		return []string{"/: the tool's input schema is not a valid JSON Schema (" + bounded(firstLine(s.inErr.Error()), maxSchemaMessage) + ")"}
	}
	if len(raw) == 0 || string(raw) == "null" {
		raw = json.RawMessage(`{}`)
	}
	return validate(s.in, raw)
}

// checkResult validates a tool result's structuredContent against the output schema. It
// returns "" when the result conforms (or the tool has no output schema, or the result is an
// error result), else why not, without any value of the result.
func (s *schemas) checkResult(result json.RawMessage) string {
	if !s.hasOutput || isErrorResult(result) {
		return ""
	}
	if s.outErr != nil {
		return "the tool's output schema is not a valid JSON Schema (" + bounded(firstLine(s.outErr.Error()), maxSchemaMessage) + ")"
	}
	var r struct {
		Structured json.RawMessage `json:"structuredContent"`
	}
	if json.Unmarshal(result, &r) != nil || len(r.Structured) == 0 || string(r.Structured) == "null" {
		return "the result has no structuredContent, which a tool with an output schema must return"
	}
	if errs := validate(s.out, r.Structured); len(errs) > 0 {
		return joinSchemaErrors(errs)
	}
	return ""
}

// joinSchemaErrors is the first error and how many more there are.
func joinSchemaErrors(errs []string) string {
	if len(errs) == 1 {
		return errs[0]
	}
	return fmt.Sprintf("%s (%d more)", errs[0], len(errs)-1)
}

// validate validates a JSON document against a compiled schema and describes what does not
// match: at most maxSchemaErrors "/path: message" strings that name keywords, types and
// property names, never values.
func validate(sch *jsonschema.Schema, raw json.RawMessage) []string {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return []string{"/: not valid JSON"}
	}
	err = sch.Validate(doc)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{"/: " + bounded(firstLine(err.Error()), maxSchemaMessage)}
	}
	var leaves []*jsonschema.ValidationError
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(ve)
	var out []string
	for _, e := range leaves {
		msg := pointer(e.InstanceLocation) + ": " + schemaMessage(e.ErrorKind)
		if !slices.Contains(out, msg) {
			out = append(out, msg)
		}
	}
	if len(out) == 0 {
		out = []string{"/: does not match the schema"}
	}
	slices.Sort(out) // the validator's order follows map iteration: keep decisions reproducible
	if len(out) > maxSchemaErrors {
		out = append(out[:maxSchemaErrors-1], fmt.Sprintf("/: and %d more errors", len(out)-maxSchemaErrors+1))
	}
	return out
}

// schemaMessage describes an error kind in words that never include the instance's values:
// expected types, keywords and the schema's own limits, and property names (bounded).
func schemaMessage(k jsonschema.ErrorKind) string {
	switch k := k.(type) {
	case *kind.Type:
		return fmt.Sprintf("expected %s, got %s", strings.Join(k.Want, " or "), k.Got)
	case *kind.Required:
		return "missing required " + plural(len(k.Missing), "property", "properties") + " " + names(k.Missing)
	case *kind.AdditionalProperties:
		return plural(len(k.Properties), "property", "properties") + " " + names(k.Properties) + " not allowed"
	case *kind.DependentRequired:
		return "missing " + plural(len(k.Missing), "property", "properties") + " " + names(k.Missing) + " required by " + names([]string{k.Prop})
	case *kind.Dependency:
		return "missing " + plural(len(k.Missing), "property", "properties") + " " + names(k.Missing) + " required by " + names([]string{k.Prop})
	case *kind.Enum:
		return "not one of the values the schema allows (enum)"
	case *kind.Const:
		return "not the value the schema requires (const)"
	case *kind.Pattern:
		return "does not match the pattern " + bounded(k.Want, 60)
	case *kind.Format:
		return "is not a valid " + bounded(k.Want, 40)
	case *kind.MinLength:
		return fmt.Sprintf("shorter than %d characters", k.Want)
	case *kind.MaxLength:
		return fmt.Sprintf("longer than %d characters", k.Want)
	case *kind.MinItems:
		return fmt.Sprintf("fewer than %d items", k.Want)
	case *kind.MaxItems:
		return fmt.Sprintf("more than %d items", k.Want)
	case *kind.MinProperties:
		return fmt.Sprintf("fewer than %d properties", k.Want)
	case *kind.MaxProperties:
		return fmt.Sprintf("more than %d properties", k.Want)
	case *kind.Minimum:
		return "less than the minimum " + ratString(k.Want)
	case *kind.Maximum:
		return "greater than the maximum " + ratString(k.Want)
	case *kind.ExclusiveMinimum:
		return "not greater than " + ratString(k.Want)
	case *kind.ExclusiveMaximum:
		return "not less than " + ratString(k.Want)
	case *kind.FalseSchema:
		return "not allowed (the schema is false here)"
	}
	return "does not satisfy " + bounded(strings.Join(k.KeywordPath(), "/"), 40)
}

// ratString is a schema's numeric limit: "3", "2.5".
func ratString(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return bounded(r.RatString(), 30)
	}
	return bounded(strings.TrimRight(r.FloatString(6), "0"), 30)
}

// pointer is a JSON pointer to an instance location ("/" for the whole document); property
// names are bounded.
func pointer(loc []string) string {
	if len(loc) == 0 {
		return "/"
	}
	var b strings.Builder
	for _, t := range loc {
		t = strings.ReplaceAll(strings.ReplaceAll(t, "~", "~0"), "/", "~1")
		b.WriteString("/" + bounded(t, 40))
	}
	return bounded(b.String(), 120)
}

// names quotes up to three property names, each bounded.
func names(ns []string) string {
	var q []string
	for i, n := range ns {
		if i == 3 {
			q = append(q, fmt.Sprintf("and %d more", len(ns)-3))
			break
		}
		q = append(q, fmt.Sprintf("%q", bounded(n, 40)))
	}
	return strings.Join(q, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// bounded cuts s to at most n bytes (at a rune boundary), marking the cut with "…".
func bounded(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[:i])
	}
	return s
}
