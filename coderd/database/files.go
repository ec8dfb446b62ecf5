package database

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// File is a row of files: an uploaded template tar.
type File struct {
	ID        string    `db:"id"`
	Hash      string    `db:"hash"`
	CreatedBy string    `db:"created_by"`
	Mimetype  string    `db:"mimetype"`
	Data      []byte    `db:"data"`
	CreatedAt time.Time `db:"created_at"`
}

// InsertFile stores an upload.
func (db *DB) InsertFile(ctx context.Context, f File) (File, error) {
	f.ID = uuid.NewString()
	f.CreatedAt = db.now()
	_, err := db.q().Exec(ctx, `INSERT INTO files (id, hash, created_by, mimetype, data, created_at) VALUES ($1, $2, $3, $4, $5, $6)`,
		f.ID, f.Hash, f.CreatedBy, f.Mimetype, f.Data, f.CreatedAt)
	return f, mapErr(err)
}

// FileByHash returns the caller's earlier upload of identical content,
// without its data (nil).
func (db *DB) FileByHash(ctx context.Context, hash, createdBy string) (File, error) {
	return collectOne[File](db.q().Query(ctx, `SELECT id, hash, created_by, mimetype, NULL::bytea AS data, created_at
		FROM files WHERE hash = $1 AND created_by = $2 LIMIT 1`, hash, createdBy))
}

// FileByID returns a file with its data.
func (db *DB) FileByID(ctx context.Context, id string) (File, error) {
	if uuid.Validate(id) != nil {
		return File{}, ErrNotFound
	}
	return collectOne[File](db.q().Query(ctx, `SELECT id, hash, created_by, mimetype, data, created_at FROM files WHERE id = $1`, id))
}
