package identity

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// tokenKind is what a bearer value looks like.
type tokenKind int

const (
	notJWT tokenKind = iota
	signedJWT
	encryptedJWT
)

// joseHeader is the part of a token's header Lush routes and selects keys by. It is read
// before any verification, so nothing in it is trusted beyond routing.
type joseHeader struct {
	Alg, Typ, Kid string
	bad           string // why the header is unusable, if it is
}

func (h joseHeader) isDelegation() bool {
	t := strings.ToLower(h.Typ)
	return strings.TrimPrefix(t, "application/") == DelegationType
}

// sniff splits a bearer value and decodes its header. A value is a JWT when it has three (JWS)
// or five (JWE) dot-separated parts and the first is a base64url JSON object; anything else is
// an API key.
func sniff(tok string) ([]string, joseHeader, tokenKind) {
	n := strings.Count(tok, ".")
	if n != 2 && n != 4 {
		return nil, joseHeader{}, notJWT
	}
	parts := strings.Split(tok, ".")
	raw, err := b64(parts[0])
	if err != nil {
		return nil, joseHeader{}, notJWT
	}
	obj, err := decodeObject(raw)
	if err != nil {
		return nil, joseHeader{}, notJWT
	}
	if n == 4 {
		return parts, joseHeader{}, encryptedJWT
	}
	var h joseHeader
	for _, f := range []struct {
		name string
		dst  *string
	}{{"alg", &h.Alg}, {"typ", &h.Typ}, {"kid", &h.Kid}} {
		v, ok, err := obj.str(f.name)
		switch {
		case err != nil:
			h.bad = fmt.Sprintf("the token header's %s is not a string", f.name)
		case ok:
			*f.dst = v
		}
	}
	if h.bad == "" && h.Alg == "" {
		h.bad = "the token header has no alg"
	}
	if _, err := b64(parts[2]); err != nil && h.bad == "" {
		h.bad = "the token's signature is not unpadded base64url"
	}
	return parts, h, signedJWT
}

// b64 decodes unpadded base64url strictly, so that one token has exactly one spelling.
func b64(s string) ([]byte, error) {
	return base64.RawURLEncoding.Strict().DecodeString(s)
}

// claims is a JSON object's members, undecoded.
type claims map[string]json.RawMessage

// decodeObject decodes a JSON object, refusing duplicate member names (two parsers could
// disagree about which one counts) and trailing data.
func decodeObject(b []byte) (claims, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	out := claims{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, ok := t.(string)
		if !ok {
			return nil, errors.New("not a JSON object")
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, err
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("member %q appears twice", name)
		}
		out[name] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return out, nil
}

// str returns a string member; an error if it is present but not a string.
func (c claims) str(name string) (string, bool, error) {
	raw, ok := c[name]
	if !ok {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", true, fmt.Errorf("%s is not a string", name)
	}
	return s, true, nil
}

// strs returns an array-of-strings member.
func (c claims) strs(name string) ([]string, bool, error) {
	raw, ok := c[name]
	if !ok {
		return nil, false, nil
	}
	var s []string
	if err := json.Unmarshal(raw, &s); err != nil || s == nil {
		return nil, true, fmt.Errorf("%s is not an array of strings", name)
	}
	return s, true, nil
}

// audience returns aud, a string or an array of strings.
func (c claims) audience() ([]string, bool, error) {
	raw, ok := c["aud"]
	if !ok {
		return nil, false, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		return []string{one}, true, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil || many == nil {
		return nil, true, errors.New("aud is neither a string nor an array of strings")
	}
	return many, true, nil
}

// maxNumericDate is 9999-12-31T23:59:59Z.
const maxNumericDate = 253402300799

// date returns a NumericDate member (seconds since the epoch, possibly fractional).
func (c claims) date(name string) (time.Time, bool, error) {
	raw, ok := c[name]
	if !ok {
		return time.Time{}, false, nil
	}
	// raw is one valid JSON value, so a leading digit or '-' makes it a JSON number, which
	// ParseFloat reads exactly.
	if len(raw) == 0 || !(raw[0] == '-' || raw[0] >= '0' && raw[0] <= '9') {
		return time.Time{}, true, fmt.Errorf("%s is not a number of seconds since 1970", name)
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsNaN(f) || f < 0 || f > maxNumericDate {
		return time.Time{}, true, fmt.Errorf("%s is not a number of seconds since 1970", name)
	}
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(frac*1e9)).UTC(), true, nil
}

// checkTimes applies exp (required), nbf and iat with leeway.
func checkTimes(c claims, now time.Time, leeway time.Duration, what string) (exp, iat time.Time, e *Error) {
	exp, ok, err := c.date("exp")
	switch {
	case err != nil:
		return exp, iat, fail(CodeInvalidToken, "the %s's %v", what, err)
	case !ok:
		return exp, iat, fail(CodeInvalidToken, "the %s has no exp claim: tokens must expire (fix the issuer's settings)", what)
	case !now.Before(exp.Add(leeway)):
		return exp, iat, fail(CodeExpiredToken, "the %s expired at %s: obtain a new token", what, stamp(exp))
	}
	nbf, ok, err := c.date("nbf")
	switch {
	case err != nil:
		return exp, iat, fail(CodeInvalidToken, "the %s's %v", what, err)
	case ok && now.Add(leeway).Before(nbf):
		return exp, iat, fail(CodeInvalidToken, "the %s is not valid before %s (the clock skew allowance is %s): check the clocks of the issuer and this server", what, stamp(nbf), leeway)
	}
	iat, ok, err = c.date("iat")
	switch {
	case err != nil:
		return exp, iat, fail(CodeInvalidToken, "the %s's %v", what, err)
	case ok && now.Add(leeway).Before(iat):
		return exp, iat, fail(CodeInvalidToken, "the %s was issued in the future, at %s (the clock skew allowance is %s): check the clocks of the issuer and this server", what, stamp(iat), leeway)
	}
	return exp, iat, nil
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }
