package codersdk

import (
	"context"
	"io"
	"net/http"
)

// ContentTypeTar is the only content type POST /api/v2/files accepts.
const ContentTypeTar = "application/x-tar"

// UploadResponse names an uploaded file. Coder calls the id "hash".
type UploadResponse struct {
	ID string `json:"hash"`
}

// Upload stores a template tar and returns its id.
func (c *Client) Upload(ctx context.Context, tar io.Reader) (UploadResponse, error) {
	var u UploadResponse
	err := c.doWithHeader(ctx, http.MethodPost, "/api/v2/files", tar, &u, func(r *http.Request) {
		r.Header.Set("Content-Type", ContentTypeTar)
	}, http.StatusCreated, http.StatusOK)
	return u, err
}

// Download returns the bytes of an uploaded file.
func (c *Client) Download(ctx context.Context, id string) ([]byte, error) {
	return c.getBytes(ctx, "/api/v2/files/"+id)
}
