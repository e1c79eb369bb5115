package vault

import (
	"fmt"
	"strings"
)

// Rule ids of denials for want of a credential, as they appear in decision-log events.
const (
	RuleMissing     = "lush.credentials.missing"
	RuleUnavailable = "lush.credentials.unavailable"
)

// MissingError says that no credential is configured for a principal on a tool, and how to
// configure one.
type MissingError struct {
	Tool      string
	Principal string
	Type      string   // the declared type ("" when the declarations disagree)
	Detail    string   // what was found instead, if anything
	Fixes     []string // commands that would configure it: lushctl auth add …, vault kv put …
}

// ACredential names a credential of type typ with its article: "an oauth credential", "a bearer
// credential"; "a credential" without a type.
func ACredential(typ string) string {
	switch {
	case typ == "":
		return "a credential"
	case strings.ContainsRune("aeiou", rune(typ[0])):
		return "an " + typ + " credential"
	}
	return "a " + typ + " credential"
}

func (e *MissingError) Error() string {
	msg := fmt.Sprintf("%s needs %s for %s, and none is configured", e.Tool, ACredential(e.Type), e.Principal)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	switch len(e.Fixes) {
	case 0:
	case 1:
		msg += ". Configure it with: " + e.Fixes[0]
	default:
		msg += ". Configure it with one of: " + strings.Join(e.Fixes, " | ")
	}
	return msg
}

// Rule is the rule id of the denial.
func (e *MissingError) Rule() string { return RuleMissing }

// Reason is what the caller is told: the whole message, which holds no secret.
func (e *MissingError) Reason() string { return e.Error() }

// UnavailableError says that a source could not give a credential (Vault unreachable and nothing
// cached, Vault refused, the local file is unreadable).
type UnavailableError struct {
	Tool      string
	Principal string
	Source    string // "vault <path>", "file <path>"
	Err       error
}

func (e *UnavailableError) Error() string {
	return fmt.Sprintf("the credential of %s for %s cannot be had from %s: %v", e.Principal, e.Tool, e.Source, e.Err)
}

func (e *UnavailableError) Unwrap() error { return e.Err }

// Rule is the rule id of the denial.
func (e *UnavailableError) Rule() string { return RuleUnavailable }

// Reason is what the caller is told: no addresses or paths of the credential store.
func (e *UnavailableError) Reason() string {
	return fmt.Sprintf("the credential that %s needs for %s cannot be fetched right now (the operator can find why in the gateway's log and the decision log); the call was not made", e.Tool, e.Principal)
}
