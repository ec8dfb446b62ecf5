package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/bcrypt"

	"airgapcoder/codersdk"
)

// ResetPassword sets the password of user (a user name or email) in the
// appliance's own database, for an admin who lost theirs: run on the host,
// as root, it needs no session and no working sign-in (as Coder's
// `coder reset-password`). The user's sessions are revoked, so a password
// that leaked stops working everywhere at once. It works whether the
// appliance runs or not, and is recorded in the audit journal.
func ResetPassword(ctx context.Context, dir, user, password string, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// coderd's own rules for a password.
	if len(password) < 8 || len(password) > 72 {
		return errors.New("reset password: the password must be 8 to 72 bytes long")
	}
	hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.DefaultCost)
	if err != nil {
		return err
	}
	l := Layout{Dir: dir}
	if abs, err := filepath.Abs(dir); err == nil {
		l.Dir = abs
	}
	op := newOperation(codersdk.AuditActionWrite, "").set("user", user).set("what", "password reset")
	var username string
	ran := false
	err = withDatabase(ctx, l.Dir, log, false, func(info pgInfo) error {
		conn, err := pgx.Connect(ctx, info.URL)
		if err != nil {
			return fmt.Errorf("%w: %v", errUnreachable, err)
		}
		defer conn.Close(context.Background())
		ran = true
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var id string
			err := tx.QueryRow(ctx, `UPDATE users SET hashed_password = $1, updated_at = now()
				WHERE (lower(username) = lower($2) OR lower(email) = lower($2)) AND deleted = false RETURNING id, username`, hash, user).Scan(&id, &username)
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("no user %q in this appliance (give the user name or email)", user)
			}
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, `DELETE FROM api_keys WHERE user_id = $1`, id)
			return err
		})
	})
	if ran {
		if current, cerr := l.CurrentRelease(); cerr == nil {
			op.release = current
		}
		op.record(l, log, "password reset of user "+user, err)
	}
	if err != nil {
		return fmt.Errorf("reset password: %w", err)
	}
	log.Info("password reset", "user", username)
	return nil
}
