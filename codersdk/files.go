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
	resp, err := c.Request(ctx, http.MethodPost, "/api/v2/files", tar, func(r *http.Request) {
		r.Header.Set("Content-Type", ContentTypeTar)
	})
	if err != nil {
		return UploadResponse{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		return UploadResponse{}, ReadBodyAsError(resp)
	}
	var u UploadResponse
	return u, decodeJSON(resp, &u)
}

// Download returns the bytes of an uploaded file.
func (c *Client) Download(ctx context.Context, id string) ([]byte, error) {
	resp, err := c.Request(ctx, http.MethodGet, "/api/v2/files/"+id, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, ReadBodyAsError(resp)
	}
	return io.ReadAll(resp.Body)
}
