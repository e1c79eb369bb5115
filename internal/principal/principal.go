// Package principal parses the identities Lush authorizes: users, groups and service accounts,
// written as "user:<id>", "group:<name>" and "serviceaccount:<name>".
package principal

import (
	"fmt"
	"strings"
	"unicode"
)

// Kind is the type of a principal.
type Kind string

// The three kinds of principal.
const (
	User           Kind = "user"
	Group          Kind = "group"
	ServiceAccount Kind = "serviceaccount"
)

// Kinds lists the principal kinds in the order docs and messages show them.
var Kinds = []Kind{User, Group, ServiceAccount}

// Everyone is the group every authenticated principal belongs to.
const Everyone = "group:everyone"

// maxNameLen bounds a principal's name; identity providers' subjects fit easily.
const maxNameLen = 256

// Principal is a parsed identity.
type Principal struct {
	Kind Kind
	Name string
}

// String renders the principal in its canonical "kind:name" form.
func (p Principal) String() string { return string(p.Kind) + ":" + p.Name }

// aliases are prefixes people write by mistake, mapped to the kind they meant.
var aliases = map[string]Kind{
	"users": User, "usr": User, "groups": Group, "grp": Group, "team": Group, "role": Group,
	"service_account": ServiceAccount, "service-account": ServiceAccount, "serviceAccount": ServiceAccount,
	"serviceaccounts": ServiceAccount, "sa": ServiceAccount, "svc": ServiceAccount,
}

// Error is a principal that does not parse: what is wrong, and how to write it instead.
type Error struct {
	Problem string
	Hint    string // may be empty
}

func (e *Error) Error() string {
	if e.Hint == "" {
		return e.Problem
	}
	return e.Problem + ": " + e.Hint
}

// Parse parses "kind:name". The error (an *Error) explains the expected form and, for a
// misspelt kind, the form that was probably meant.
func Parse(s string) (Principal, error) {
	kind, name, ok := strings.Cut(s, ":")
	if !ok {
		return Principal{}, &Error{fmt.Sprintf("principal %q has no kind", s), fmt.Sprintf("write user:%s, group:%s or serviceaccount:%s", s, s, s)}
	}
	k := Kind(kind)
	switch k {
	case User, Group, ServiceAccount:
	default:
		if meant, ok := aliases[kind]; ok {
			return Principal{}, &Error{fmt.Sprintf("principal %q has unknown kind %q", s, kind), fmt.Sprintf("did you mean %s:%s?", meant, name)}
		}
		return Principal{}, &Error{fmt.Sprintf("principal %q has unknown kind %q", s, kind), "the kinds are user, group and serviceaccount"}
	}
	if err := checkName(name); err != nil {
		return Principal{}, &Error{fmt.Sprintf("principal %q: %v", s, err), ""}
	}
	return Principal{Kind: k, Name: name}, nil
}

func checkName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("the name after the colon is empty")
	case len(name) > maxNameLen:
		return fmt.Errorf("the name is longer than %d bytes", maxNameLen)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("the name contains whitespace or a control character")
		}
	}
	return nil
}

// ValidServiceAccountName reports whether name may be declared as a service account in
// lush.yaml: lower-case letters, digits, '-', '_' and '.', starting with a letter or digit.
func ValidServiceAccountName(name string) bool {
	if name == "" || len(name) > 63 {
		return false
	}
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case i > 0 && (r == '-' || r == '_' || r == '.'):
		default:
			return false
		}
	}
	return true
}
