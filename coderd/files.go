package coderd

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/gin-gonic/gin"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
	"airgapcoder/internal/bodydeadline"
	"airgapcoder/internal/templatetar"
)

// postFile stores a template tar after checking it is safe to unpack: no
// path leaves the folder, no links or devices, not over the size limit.
func (api *API) postFile(c *gin.Context) error {
	if err := authorize(c, resFile, actCreate, actor(c).ID); err != nil {
		return err
	}
	if ct := c.ContentType(); ct != codersdk.ContentTypeTar {
		return errorf(http.StatusUnsupportedMediaType, "", "Content-Type must be %s, got %q", codersdk.ContentTypeTar, ct)
	}
	// Up to MaxUploadSize from an authenticated user may take its time
	// (bodydeadline.go).
	bodydeadline.Lift(c.Request)
	limit := api.opts.MaxUploadSize
	body, err := io.ReadAll(io.LimitReader(c.Request.Body, limit+1))
	if err != nil {
		return bodyReadError("Upload", err)
	}
	if int64(len(body)) > limit {
		return errorf(http.StatusRequestEntityTooLarge, "", "Template upload is larger than the %d byte limit; remove large files (e.g. .terraform/, binaries) from the folder", limit)
	}
	if _, err := templatetar.Validate(bytes.NewReader(body), limit); err != nil {
		status := http.StatusBadRequest
		if errors.Is(err, templatetar.ErrTooLarge) {
			status = http.StatusRequestEntityTooLarge
		}
		return errorf(status, err.Error(), "Rejected template upload: %s", uploadReason(err))
	}
	sum := sha256.Sum256(body)
	hash := hex.EncodeToString(sum[:])
	ctx := c.Request.Context()
	me := actor(c)
	if f, err := api.db.FileByHash(ctx, hash, me.ID); err == nil {
		c.JSON(http.StatusOK, codersdk.UploadResponse{ID: f.ID})
		return nil
	} else if !errors.Is(err, database.ErrNotFound) {
		return err
	}
	f, err := api.db.InsertFile(ctx, database.File{Hash: hash, CreatedBy: me.ID, Mimetype: codersdk.ContentTypeTar, Data: body})
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, codersdk.UploadResponse{ID: f.ID})
	return nil
}

func uploadReason(err error) string {
	for _, e := range []struct {
		err    error
		reason string
	}{
		{templatetar.ErrUnsafePath, "a path would land outside the template folder"},
		{templatetar.ErrUnsupportedType, "it holds a link, device or other entry that is not a file or folder"},
		{templatetar.ErrDuplicatePath, "a path appears twice"},
		{templatetar.ErrNotTar, "it is not a tar archive"},
		{templatetar.ErrEmpty, "the template has no files"},
		{templatetar.ErrTooLarge, "it is too large"},
	} {
		if errors.Is(err, e.err) {
			return e.reason
		}
	}
	return "it is not a valid template archive"
}

func (api *API) file(c *gin.Context) error {
	f, err := api.db.FileByID(c.Request.Context(), c.Param("file"))
	if err != nil {
		return notFoundAs("File", err)
	}
	if err := authorize(c, resFile, actRead, f.CreatedBy); err != nil {
		return err
	}
	serveFile(c, f)
	return nil
}

func serveFile(c *gin.Context, f database.File) {
	c.Header("Content-Disposition", fmt.Sprintf("attachment; filename=%q", f.ID+".tar"))
	c.Data(http.StatusOK, f.Mimetype, f.Data)
}
