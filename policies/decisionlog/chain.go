package decisionlog

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The hash chain. Every entry the log commits (an event, a completion, a retention record) takes
// the next position of its partition's chain, and its hash is
//
//	SHA-256(previous entry's hash || canonical encoding of the entry)
//
// (32 zero bytes before the first entry). Changing, removing or reordering any entry changes the
// hash of every entry after it, so Verify finds the first one that does not match. A checkpoint
// signs a partition's head (position and hash) with an Ed25519 key: someone who can write the
// database but does not hold the key cannot rewrite the chain behind a checkpoint, nor truncate it
// below one, unnoticed. The entries after the last checkpoint have no such protection: the log
// bounds them by time (CheckpointEvery) and count (CheckpointEntries), Close signs them, and
// Verify counts them.
//
// Retention deletes whole segments: every entry up to an expired checkpoint. It appends a
// retention record (a marker entry) that names the first position kept and the hash of the last
// one deleted, so the rest of the chain still verifies from there.

// DefaultPartition is the chain partition a Log writes when no Partition option is given.
const DefaultPartition = "local"

// Entry kinds, as Verify names them.
const (
	KindEvent      = "event"
	KindCompletion = "completion"
	KindRetention  = "retention"
)

// hashSize is the size of an entry hash (SHA-256).
const hashSize = sha256.Size

// genesis is the "previous hash" of a partition's first entry.
var genesis = make([]byte, hashSize)

// encoder builds an entry's canonical encoding: a kind tag, then fields, each tagged and length
// prefixed so that no two different entries encode alike.
type encoder struct{ buf []byte }

func (e *encoder) str(s string) {
	e.buf = append(e.buf, 's')
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(len(s)))
	e.buf = append(e.buf, s...)
}

func (e *encoder) int(v int64) {
	e.buf = append(e.buf, 'i')
	e.buf = binary.BigEndian.AppendUint64(e.buf, uint64(v))
}

// opt encodes a nullable column: nil (SQL NULL), a string or an int64.
func (e *encoder) opt(v any) {
	switch v := v.(type) {
	case nil:
		e.buf = append(e.buf, 'n')
	case string:
		e.str(v)
	case int64:
		e.int(v)
	default:
		panic(fmt.Sprintf("decisionlog: cannot hash a %T", v))
	}
}

// chainHash returns SHA-256(prev || enc).
func chainHash(prev []byte, enc []byte) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write(enc)
	return h.Sum(nil)
}

// maxScratch bounds the buffer a writer keeps between entries (a larger one, for a large event,
// is dropped after use).
const maxScratch = 64 << 10

// hashScratch returns SHA-256 of *scratch, which holds the previous hash followed by an entry's
// encoding (chainHash(prev, enc) without copying either), and keeps the buffer for the next entry.
func hashScratch(scratch *[]byte) []byte {
	sum := sha256.Sum256(*scratch)
	if cap(*scratch) > maxScratch {
		*scratch = nil
	}
	return sum[:]
}

// eventEntry encodes an event: its position and the stored columns that are not derived from the
// event document (decision_id and ts are, but they are keys: they are checked both ways).
func eventEntry(part string, pos int64, decisionID string, ts int64, event string) []byte {
	return appendEventEntry(make([]byte, 0, 128+len(part)+len(decisionID)+len(event)), part, pos, decisionID, ts, event)
}

// appendEventEntry appends eventEntry's encoding to dst.
func appendEventEntry(dst []byte, part string, pos int64, decisionID string, ts int64, event string) []byte {
	e := encoder{buf: dst}
	e.str("lush.decisionlog.event.v1")
	e.str(part)
	e.int(pos)
	e.str(decisionID)
	e.int(ts)
	e.str(event)
	return e.buf
}

// completionEntry encodes a completion: every stored column.
func completionEntry(part string, pos int64, decisionID string, ts int64, status string, latency int64, response, errMsg, tokensIn, tokensOut any) []byte {
	return appendCompletionEntry(nil, part, pos, decisionID, ts, status, latency, response, errMsg, tokensIn, tokensOut)
}

// appendCompletionEntry appends completionEntry's encoding to dst.
func appendCompletionEntry(dst []byte, part string, pos int64, decisionID string, ts int64, status string, latency int64, response, errMsg, tokensIn, tokensOut any) []byte {
	e := encoder{buf: dst}
	e.str("lush.decisionlog.completion.v1")
	e.str(part)
	e.int(pos)
	e.str(decisionID)
	e.int(ts)
	e.str(status)
	e.int(latency)
	e.opt(response)
	e.opt(errMsg)
	e.opt(tokensIn)
	e.opt(tokensOut)
	return e.buf
}

// markerEntry encodes a marker (a retention record).
func markerEntry(part string, pos int64, kind string, ts int64, body string) []byte {
	e := encoder{}
	e.str("lush.decisionlog.marker.v1")
	e.str(part)
	e.int(pos)
	e.str(kind)
	e.int(ts)
	e.str(body)
	return e.buf
}

// RetentionRecord is the body of a retention record: the entries below Below were deleted, the last of
// them had hash PrevHash, and they were the segments up to a checkpoint taken before Cutoff.
type RetentionRecord struct {
	Below       int64     `json:"below"`     // the first position kept
	PrevHash    string    `json:"prev_hash"` // hex hash of position Below-1
	Cutoff      time.Time `json:"cutoff"`    // entries older than this were due for deletion
	Checkpoint  time.Time `json:"checkpoint"`
	Events      int64     `json:"events"` // deleted by this record
	Completions int64     `json:"completions"`
	Markers     int64     `json:"markers"`
}

// Checkpoint is a signed statement of a partition's chain head.
type Checkpoint struct {
	Partition string    `json:"partition"`
	Pos       int64     `json:"pos"`
	Hash      string    `json:"hash"` // hex
	Timestamp time.Time `json:"timestamp"`
	KeyID     string    `json:"key_id,omitempty"`    // KeyID of the signing key; empty when unsigned
	Signature string    `json:"signature,omitempty"` // hex Ed25519 signature of SignedMessage
	PublicKey string    `json:"public_key,omitempty"`
}

// SignedMessage is what a checkpoint's signature covers.
func (c *Checkpoint) SignedMessage() []byte {
	return []byte("lush-decisionlog-checkpoint-v1\n" + c.Partition + "\n" + strconv.FormatInt(c.Pos, 10) + "\n" +
		c.Hash + "\n" + strconv.FormatInt(c.Timestamp.UnixNano(), 10) + "\n")
}

// KeyID names a public key: the first 16 hex digits of its SHA-256.
func KeyID(pub ed25519.PublicKey) string {
	sum := sha256.Sum256(pub)
	return hex.EncodeToString(sum[:8])
}

// sign fills in the checkpoint's signature fields.
func (c *Checkpoint) sign(key ed25519.PrivateKey) {
	if key == nil {
		return
	}
	pub := key.Public().(ed25519.PublicKey)
	c.KeyID = KeyID(pub)
	c.PublicKey = hex.EncodeToString(pub)
	c.Signature = hex.EncodeToString(ed25519.Sign(key, c.SignedMessage()))
}

// LoadOrCreateSigningKey reads the Ed25519 private key (PKCS #8 PEM) at path, or creates one there
// (mode 0600) together with its public key at path+".pub" for auditors to pin with
// `lushctl audit verify --public-key`.
func LoadOrCreateSigningKey(path string) (ed25519.PrivateKey, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		return parsePrivateKey(path, data)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("read checkpoint key: %w", err)
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("create checkpoint key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("create checkpoint key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("create checkpoint key: %w", err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("create checkpoint key: %w", err)
	}
	// The key is written whole to a file of its own and then linked into place, which fails when
	// the path exists: a process that starts at the same moment reads either no key or the whole
	// key of whoever linked first, never a half-written one.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".checkpoint-key-*")
	if err != nil {
		return nil, fmt.Errorf("create checkpoint key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := errors.Join(tmp.Chmod(0o600), pem.Encode(tmp, &pem.Block{Type: "PRIVATE KEY", Bytes: der}), tmp.Sync(), tmp.Close()); err != nil {
		return nil, fmt.Errorf("create checkpoint key %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) { // another process created it first
			return LoadOrCreateSigningKey(path)
		}
		return nil, fmt.Errorf("create checkpoint key: %w", err)
	}
	if err := writeFileAtomic(path+".pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER}), 0o644); err != nil {
		return nil, fmt.Errorf("create checkpoint key: write public key: %w", err)
	}
	return key, nil
}

// writeFileAtomic writes data to path through a temporary file renamed into place, so that a
// reader sees the old content or the new, whole.
func writeFileAtomic(path string, data []byte, perm fs.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := errors.Join(tmp.Chmod(perm), tmp.Close()); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func parsePrivateKey(path string, data []byte) (ed25519.PrivateKey, error) {
	block, _ := pem.Decode(data)
	if block == nil || block.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("checkpoint key %s: not a PEM \"PRIVATE KEY\" block (PKCS #8 Ed25519; delete it to have a new one created)", path)
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("checkpoint key %s: %w", path, err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("checkpoint key %s: a %T, not an Ed25519 key", path, k)
	}
	return key, nil
}

// ParsePublicKey reads an Ed25519 public key from PEM ("PUBLIC KEY", as LoadOrCreateSigningKey
// writes it) or from 64 hex digits (as checkpoints carry it).
func ParsePublicKey(data []byte) (ed25519.PublicKey, error) {
	if block, _ := pem.Decode(data); block != nil {
		k, err := x509.ParsePKIXPublicKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse public key: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("parse public key: a %T, not an Ed25519 key", k)
		}
		return pub, nil
	}
	raw, err := hex.DecodeString(string(bytes.TrimSpace(data)))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, errors.New("parse public key: neither a PEM \"PUBLIC KEY\" block nor 64 hex digits")
	}
	return ed25519.PublicKey(raw), nil
}
