package coderd

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

// apiError is an error with the status and envelope the client sees.
type apiError struct {
	status int
	codersdk.Response
	cause error
}

func (e *apiError) Error() string {
	if e.cause != nil {
		return fmt.Sprintf("%s: %v", e.Message, e.cause)
	}
	return e.Message
}

func (e *apiError) Unwrap() error { return e.cause }

func errorf(status int, detail string, format string, args ...any) *apiError {
	return &apiError{status: status, Response: codersdk.Response{Message: fmt.Sprintf(format, args...), Detail: detail}}
}

func badRequest(format string, args ...any) *apiError {
	return errorf(http.StatusBadRequest, "", format, args...)
}

func notFound(what string) *apiError {
	return errorf(http.StatusNotFound, "", "%s not found", what)
}

// notFoundAs is err as a handler that looked up what answers it: a
// missing row (database.ErrNotFound) is a 404 naming what; any other
// error, or nil, is as it is.
func notFoundAs(what string, err error) error {
	if errors.Is(err, database.ErrNotFound) {
		return notFound(what)
	}
	return err
}

func forbidden() *apiError {
	return errorf(http.StatusForbidden, "", "Forbidden: your role does not allow this")
}

func conflict(format string, args ...any) *apiError {
	return errorf(http.StatusConflict, "", format, args...)
}

func validation(field, detail string) *apiError {
	e := badRequest("Validation failed")
	e.Validations = []codersdk.ValidationError{{Field: field, Detail: detail}}
	return e
}

// handler is a gin handler that returns its error.
type handler func(c *gin.Context) error

// handle renders a handler's error as the error envelope; errors that are
// not apiErrors are internal and logged.
func (api *API) handle(h handler) gin.HandlerFunc {
	return func(c *gin.Context) { api.renderError(c, h(c)) }
}

// renderError answers err, unless it is nil, the client went away, or an
// answer was already written.
func (api *API) renderError(c *gin.Context, err error) {
	if err == nil {
		return
	}
	if errors.Is(err, c.Request.Context().Err()) && c.Request.Context().Err() != nil {
		return // client went away
	}
	ae := api.apiErrorOf(err, "method", c.Request.Method, "path", c.Request.URL.Path)
	if c.Writer.Written() {
		return
	}
	c.JSON(ae.status, ae.Response)
}

// apiErrorOf is err as the API answers it: an apiError as it is, a missing
// row as 404, anything else an internal error, logged with attrs.
func (api *API) apiErrorOf(err error, attrs ...any) *apiError {
	var ae *apiError
	switch {
	case errors.As(err, &ae):
	case errors.Is(err, database.ErrNotFound):
		ae = notFound("Resource")
	default:
		api.log.Error("internal error", append(attrs, "err", err)...)
		ae = errorf(http.StatusInternalServerError, err.Error(), "Internal error")
	}
	return ae
}

const maxJSONBody = 1 << 20

// bodyReadError is the answer to a request whose body could not be read:
// 408 when it did not arrive before its deadline (bodydeadline.go), else
// 400 saying why.
func bodyReadError(what string, err error) *apiError {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errorf(http.StatusRequestTimeout, err.Error(), "%s did not arrive in time", what)
	}
	return badRequest("Read %s: %v", strings.ToLower(what), err)
}

// pageQuery reads a list's ?limit= and ?offset= into limit and offset:
// non-negative integers, an absent one leaving its default as it was.
func pageQuery(c *gin.Context, limit, offset *int) error {
	for _, p := range []struct {
		name string
		dst  *int
	}{{"limit", limit}, {"offset", offset}} {
		if s := c.Query(p.name); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return validation(p.name, "must be a non-negative integer")
			}
			*p.dst = n
		}
	}
	return nil
}

// decode reads a JSON body strictly: unknown fields, trailing data and a
// body over 1 MiB are errors that say what is wrong.
func decode(c *gin.Context, v any) error {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return errorf(http.StatusUnsupportedMediaType, "", "Content-Type must be application/json, got %q", ct)
	}
	dec := json.NewDecoder(http.MaxBytesReader(c.Writer, c.Request.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var maxErr *http.MaxBytesError
		var syntaxErr *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &maxErr):
			return errorf(http.StatusRequestEntityTooLarge, "", "Request body is larger than %d bytes", maxJSONBody)
		case errors.Is(err, os.ErrDeadlineExceeded):
			return bodyReadError("Request body", err)
		case errors.Is(err, io.EOF):
			return badRequest("Request body is empty; send a JSON object")
		case errors.As(err, &syntaxErr):
			return errorf(http.StatusBadRequest, fmt.Sprintf("%v at byte %d", err, syntaxErr.Offset), "Malformed JSON in request body")
		case errors.As(err, &typeErr) && typeErr.Field == "":
			return badRequest("Request body must be a JSON object, got a JSON %s", typeErr.Value)
		case errors.As(err, &typeErr):
			return validation(typeErr.Field, fmt.Sprintf("must be a %s, got a JSON %s", typeErr.Type, typeErr.Value))
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			field := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return validation(field, "unknown field")
		default:
			return errorf(http.StatusBadRequest, err.Error(), "Malformed JSON in request body")
		}
	}
	if dec.More() {
		return badRequest("Request body has data after the JSON object")
	}
	return nil
}
