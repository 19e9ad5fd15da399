package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
)

// A checkpoint is the node's signature over the head of its chain: "every record up to Seq, whose
// hash is Head, is as written". It is a signed note (golang.org/x/mod/sumdb/note, Ed25519) whose
// text is
//
//	airlock audit checkpoint
//	node <node>
//	seq <seq>
//	head <hash of record seq>
//	time <RFC 3339>
//
// The trail carries each checkpoint as a record of its own (KindAudit, EventCheckpoint, the note
// in Note) right after the record it signs, and the node copies the latest to Redis, so a trail
// cut short after it is caught by anyone holding the copy. Anyone with the public key checks a
// checkpoint offline; the private key never leaves the node.
type Checkpoint struct {
	Node string
	Seq  uint64
	Head string
	Time time.Time
	// Note is the signed note the fields were read from (or signed into).
	Note []byte
}

const checkpointHeader = "airlock audit checkpoint\n"

// KeyName is the name a node's checkpoint key carries: "airlock-<node>".
func KeyName(node string) string { return "airlock-" + node }

func (c Checkpoint) text() string {
	return fmt.Sprintf("%snode %s\nseq %d\nhead %s\ntime %s\n", checkpointHeader, c.Node, c.Seq, c.Head, c.Time.UTC().Format(time.RFC3339Nano))
}

// signCheckpoint fills c.Note.
func signCheckpoint(c Checkpoint, s note.Signer) (Checkpoint, error) {
	msg, err := note.Sign(&note.Note{Text: c.text()}, s)
	if err != nil {
		return c, fmt.Errorf("audit: signing a checkpoint: %w", err)
	}
	c.Note = msg
	return c, nil
}

// OpenCheckpoint checks a signed checkpoint against the verifier key and reads it. The error says
// whether the signature is unknown (signed by another key: another node's, or forged), bad, or
// the text not a checkpoint.
func OpenCheckpoint(msg []byte, v note.Verifier) (Checkpoint, error) {
	text, err := openNote(msg, v)
	if err != nil {
		return Checkpoint{}, err
	}
	c, err := parseCheckpoint(text)
	c.Note = msg
	return c, err
}

// openNote checks a signed note against the verifier key and returns its text.
func openNote(msg []byte, v note.Verifier) (string, error) {
	n, err := note.Open(msg, note.VerifierList(v))
	if err != nil {
		var unknown *note.UnverifiedNoteError
		if errors.As(err, &unknown) {
			names := []string{}
			for _, s := range unknown.Note.UnverifiedSigs {
				names = append(names, s.Name)
			}
			return "", fmt.Errorf("not signed by %s (signed by %s)", v.Name(), strings.Join(names, ", "))
		}
		return "", fmt.Errorf("signature does not verify: %v", err)
	}
	return n.Text, nil
}

// noteFields reads the "key value" lines of a signed note's text after its header; what names
// the note in errors.
func noteFields(text, header, what string) (map[string]string, error) {
	rest, ok := strings.CutPrefix(text, header)
	if !ok {
		return nil, fmt.Errorf("not an airlock %s", what)
	}
	fields := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(rest, "\n"), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			return nil, fmt.Errorf("%s line %q has no value", what, line)
		}
		fields[k] = v
	}
	return fields, nil
}

func parseCheckpoint(text string) (Checkpoint, error) {
	var c Checkpoint
	fields, err := noteFields(text, checkpointHeader, "audit checkpoint")
	if err != nil {
		return c, err
	}
	c.Node, c.Head = fields["node"], fields["head"]
	if c.Seq, err = strconv.ParseUint(fields["seq"], 10, 64); err != nil {
		return c, fmt.Errorf("checkpoint seq %q: %v", fields["seq"], err)
	}
	if c.Time, err = time.Parse(time.RFC3339Nano, fields["time"]); err != nil {
		return c, fmt.Errorf("checkpoint time %q: %v", fields["time"], err)
	}
	if c.Node == "" || len(c.Head) != hashLen {
		return c, errors.New("checkpoint names no node or no head")
	}
	return c, nil
}

// LoadSigner reads the node's checkpoint key from path, creating it (and path+".pub", the
// verifier key to hand to whoever checks the trail) when it does not exist. A key made for
// another node name is refused: its checkpoints would name the wrong node.
func LoadSigner(path, node string) (note.Signer, string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		skey, vkey, gerr := note.GenerateKey(rand.Reader, KeyName(node))
		if gerr != nil {
			return nil, "", fmt.Errorf("audit: making the checkpoint key: %w", gerr)
		}
		if err := writeFileAtomic(path, []byte(skey+"\n")); err != nil {
			return nil, "", err
		}
		if err := writeFileAtomic(path+".pub", []byte(vkey+"\n")); err != nil {
			return nil, "", err
		}
		data = []byte(skey)
	} else if err != nil {
		return nil, "", fmt.Errorf("audit: checkpoint key: %w", err)
	}
	s, err := note.NewSigner(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, "", fmt.Errorf("audit: checkpoint key %s: %v", path, err)
	}
	if s.Name() != KeyName(node) {
		return nil, "", fmt.Errorf("audit: checkpoint key %s is for %q, not this node (%q): give each node its own key",
			path, s.Name(), KeyName(node))
	}
	pub, err := os.ReadFile(path + ".pub")
	if errors.Is(err, os.ErrNotExist) {
		// The public half is derived again from the private one and written back.
		vkey, derr := verifierKeyOf(strings.TrimSpace(string(data)))
		if derr != nil {
			return nil, "", fmt.Errorf("audit: checkpoint key %s: %v", path, derr)
		}
		if err := writeFileAtomic(path+".pub", []byte(vkey+"\n")); err != nil {
			return nil, "", err
		}
		pub = []byte(vkey)
	} else if err != nil {
		return nil, "", fmt.Errorf("audit: the checkpoint key's public half: %w", err)
	}
	return s, strings.TrimSpace(string(pub)), nil
}

// verifierKeyOf derives the verifier key of a note signer key
// ("PRIVATE+KEY+<name>+<hash>+<base64 of 0x01 and the Ed25519 seed>").
func verifierKeyOf(skey string) (string, error) {
	parts := strings.SplitN(skey, "+", 5) // the key itself is base64 and may hold "+"
	if len(parts) != 5 {
		return "", errors.New("not a signer key")
	}
	raw, err := base64.StdEncoding.DecodeString(parts[4])
	if err != nil || len(raw) != 1+ed25519.SeedSize || raw[0] != 1 {
		return "", errors.New("not an Ed25519 signer key")
	}
	pub := ed25519.NewKeyFromSeed(raw[1:]).Public().(ed25519.PublicKey)
	return note.NewEd25519VerifierKey(parts[2], pub)
}

// NewVerifier reads a verifier key ("airlock-<node>+<hash>+<key>", as written beside the node's
// key).
func NewVerifier(vkey string) (note.Verifier, error) {
	v, err := note.NewVerifier(strings.TrimSpace(vkey))
	if err != nil {
		return nil, fmt.Errorf("audit: verifier key: %v", err)
	}
	return v, nil
}
