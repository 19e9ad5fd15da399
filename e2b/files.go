package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strings"

	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/slots"
)

// envd's REST side: GET and POST /files, and /health. Errors are envd's {code, message}.

// maxUpload bounds one uploaded file, as the API's own PUT does not: a gzip body could
// otherwise expand without end.
const maxUpload = 1 << 30

func envdError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]any{"code": status, "message": msg})
}

// restAuth is authorize for the REST calls, whose user comes as ?username= as well.
func (s *Server) restAuth(w http.ResponseWriter, r *http.Request) (string, *client.Client, bool) {
	id, api, e := s.authorize(r)
	if e == nil {
		e = checkUser(r.URL.Query().Get("username"))
	}
	if e != nil {
		envdError(w, rpcStatus(e.code), e.msg)
		return "", nil, false
	}
	return id, api, true
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	id, c, ok := s.restAuth(w, r)
	if !ok {
		return
	}
	p := r.URL.Query().Get("path")
	e, err := c.Stat(r.Context(), id, p)
	if err == nil && e.Type == "dir" {
		envdError(w, http.StatusBadRequest, fmt.Sprintf("%s is a folder, not a file", p))
		return
	}
	if err != nil {
		status, msg := apiStatus(err)
		envdError(w, status, msg)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": path.Base(e.Path)}))
	// The body streams as it is read; a failure part-way cuts it short.
	if _, err := c.GetFile(r.Context(), id, p, w, false); err != nil {
		s.cfg.Logger.Warn("e2b: file read cut short", "sandbox", id, "err", err)
	}
}

// writtenFile is envd's EntryInfo of an upload.
type writtenFile struct {
	Name string `json:"name"`
	Type string `json:"type"`
	Path string `json:"path"`
}

func (s *Server) writeFiles(w http.ResponseWriter, r *http.Request) {
	id, c, ok := s.restAuth(w, r)
	if !ok {
		return
	}
	slots.Upload(r) // a file flows for as long as its bytes keep coming (e2b.timeouts.stall)
	if hasMetadata(r.Header) {
		envdError(w, http.StatusBadRequest, "file metadata (X-Metadata-*) is not kept: this sandbox reports envd "+EnvdVersion)
		return
	}
	q := r.URL.Query().Get("path")
	put := func(p string, body io.Reader) (writtenFile, error) {
		info, err := c.PutFile(r.Context(), id, p, &capped{r: body, n: maxUpload}, false)
		if err != nil {
			return writtenFile{}, err
		}
		return writtenFile{Name: path.Base(info.Path), Type: "file", Path: info.Path}, nil
	}
	// Either kind of body may come compressed; the cap on each file applies after decompression.
	var body io.Reader = r.Body
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			envdError(w, http.StatusBadRequest, "the gzip body: "+err.Error())
			return
		}
		body = zr
	default:
		envdError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Encoding %q is not gzip", enc))
		return
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var out []writtenFile
	switch mt {
	case "application/octet-stream":
		if q == "" {
			envdError(w, http.StatusBadRequest, "an octet-stream upload names its file in ?path=")
			return
		}
		f, err := put(q, body)
		if err != nil {
			writeUploadError(w, err)
			return
		}
		out = append(out, f)
	case "multipart/form-data":
		mr := multipart.NewReader(body, params["boundary"])
		for {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				envdError(w, http.StatusBadRequest, "the multipart body: "+err.Error())
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			// The SDK names each part's file by its path; Part.FileName would keep only its base.
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			p := dp["filename"]
			if q != "" {
				p = q
			}
			if p == "" {
				envdError(w, http.StatusBadRequest, "a file part names no path (its filename) and the request no ?path=")
				return
			}
			f, err := put(p, part)
			part.Close()
			if err != nil {
				writeUploadError(w, err)
				return
			}
			out = append(out, f)
		}
		if len(out) == 0 {
			envdError(w, http.StatusBadRequest, "the multipart body has no part named file")
			return
		}
	default:
		envdError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Type %q is not multipart/form-data or application/octet-stream", mt))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func hasMetadata(h http.Header) bool {
	for k := range h {
		if strings.HasPrefix(strings.ToLower(k), "x-metadata-") {
			return true
		}
	}
	return false
}

func writeUploadError(w http.ResponseWriter, err error) {
	if errors.Is(err, errTooLarge) {
		envdError(w, http.StatusRequestEntityTooLarge, err.Error())
		return
	}
	status, msg := apiStatus(err)
	envdError(w, status, msg)
}

var errTooLarge = fmt.Errorf("the file is larger than %d bytes, the most one upload takes", maxUpload)

// capped reads at most n bytes and fails past them.
type capped struct {
	r io.Reader
	n int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.n < 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > c.n+1 {
		p = p[:c.n+1]
	}
	k, err := c.r.Read(p)
	if c.n -= int64(k); c.n < 0 {
		return 0, errTooLarge
	}
	return k, err
}

// health answers 204 while the sandbox's lease is held, and 502 (what the SDK reads as not
// running) once it is not, or while it is paused.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	id, api, e := s.authorize(r)
	if e != nil {
		envdError(w, rpcStatus(e.code), e.msg)
		return
	}
	l, err := api.Get(r.Context(), id)
	if err != nil {
		_, msg := apiStatus(err)
		envdError(w, http.StatusBadGateway, msg)
		return
	}
	if l.State == "paused" {
		envdError(w, http.StatusBadGateway, fmt.Sprintf("sandbox %s is paused: Sandbox.connect resumes it", id))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
