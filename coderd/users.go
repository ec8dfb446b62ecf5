package coderd

import (
	"errors"
	"fmt"
	"net/http"
	"net/mail"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"golang.org/x/crypto/bcrypt"

	"airgapcoder/coderd/database"
	"airgapcoder/codersdk"
)

var usernameRe = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,30}[a-zA-Z0-9])?$`)

// validateNewUser checks what a new user is created with.
func validateNewUser(email, username, name, password string) error {
	if err := validateUsername(username); err != nil {
		return err
	}
	if a, err := mail.ParseAddress(email); err != nil || a.Address != email {
		return validation("email", "must be a plain email address like name@example.com")
	}
	if len(password) < 8 {
		return validation("password", "must be at least 8 characters")
	}
	if len(password) > 72 {
		return validation("password", "must be at most 72 bytes")
	}
	return validateName(name)
}

// validateUsername checks a username as Coder does: 1-32 letters, digits
// or inner hyphens, and not "me", which names the caller in paths.
func validateUsername(username string) error {
	if !usernameRe.MatchString(username) {
		return validation("username", "must be 1-32 letters, digits or inner hyphens")
	}
	if username == codersdk.Me {
		return validation("username", `"me" is reserved`)
	}
	return nil
}

// validateName checks a full name as Coder does: at most 128 characters,
// no surrounding spaces.
func validateName(name string) error {
	if len([]rune(name)) > 128 {
		return validation("name", "must be at most 128 characters")
	}
	if strings.TrimSpace(name) != name {
		return validation("name", "must not start or end with spaces")
	}
	return nil
}

func roleNames(names []string) []codersdk.Role {
	out := []codersdk.Role{}
	for _, n := range names {
		display := map[string]string{codersdk.RoleOwner: "Owner", codersdk.RoleTemplateAdmin: "Template Admin"}[n]
		out = append(out, codersdk.Role{Name: n, DisplayName: display})
	}
	return out
}

func (api *API) convertUser(u database.User) codersdk.User {
	return codersdk.User{
		ID: u.ID, Username: u.Username, Name: u.Name, Email: u.Email, CreatedAt: u.CreatedAt, LastSeenAt: u.LastSeenAt,
		Status: u.Status, Roles: roleNames(u.Roles), OrganizationIDs: []string{api.org.ID},
	}
}

func (api *API) firstUserExists(c *gin.Context) error {
	n, err := api.db.CountUsers(c.Request.Context())
	if err != nil {
		return err
	}
	if n == 0 {
		return errorf(http.StatusNotFound, "", "The first user has not been created yet")
	}
	c.JSON(http.StatusOK, codersdk.Response{Message: "The first user has already been created"})
	return nil
}

func (api *API) postFirstUser(c *gin.Context) error {
	var req codersdk.CreateFirstUserRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if err := validateNewUser(req.Email, req.Username, req.Name, req.Password); err != nil {
		return err
	}
	hash, err := hashPassword(req.Password)
	if err != nil {
		return err
	}
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceUser).resource("", req.Username).
		field("email", req.Email).field("roles", []string{codersdk.RoleOwner}).field("first_user", true)
	var user database.User
	err = e.inTx(c.Request.Context(), http.StatusCreated, func(tx *database.DB) error {
		var err error
		user, err = tx.InsertFirstUser(c.Request.Context(), database.InsertUserParams{
			Email: req.Email, Username: req.Username, Name: req.Name, HashedPassword: hash, Roles: []string{codersdk.RoleOwner},
		})
		e.resource(user.ID, "")
		return err
	})
	if errors.Is(err, database.ErrFirstUserExists) {
		return conflict("The first user has already been created; log in instead")
	}
	if err != nil {
		return err
	}
	api.log.Info("first user created", "username", user.Username)
	if api.opts.OnFirstUser != nil {
		token, _, err := api.newAPIKey(c.Request.Context(), user.ID, loginTypeToken, "first-boot-"+randomString(6), time.Hour)
		if err != nil {
			return err
		}
		api.runFirstUserHook(user.Username, token)
	}
	c.JSON(http.StatusCreated, codersdk.CreateFirstUserResponse{UserID: user.ID, OrganizationID: api.org.ID})
	return nil
}

func (api *API) postLogin(c *gin.Context) error {
	var req codersdk.LoginWithPasswordRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if req.Email == "" {
		return validation("email", "is required")
	}
	if req.Password == "" {
		return validation("password", "is required")
	}
	ctx := c.Request.Context()
	e := api.audit(c, codersdk.AuditActionLogin, codersdk.AuditResourceUser).resource("", req.Email).field("email", req.Email)
	user, err := api.db.UserByEmailOrUsername(ctx, req.Email, req.Email)
	wrong := errorf(http.StatusUnauthorized, "", "Incorrect email or password")
	if errors.Is(err, database.ErrNotFound) {
		_ = bcrypt.CompareHashAndPassword(dummyHash, []byte(req.Password))
		return wrong
	}
	if err != nil {
		return err
	}
	if bcrypt.CompareHashAndPassword(user.HashedPassword, []byte(req.Password)) != nil {
		return wrong
	}
	// With password logins disabled only owners may still use one (as
	// Coder's --disable-password-auth: no lock-out when the identity
	// provider is down).
	if api.opts.DisablePasswordAuth && !slices.Contains(user.Roles, codersdk.RoleOwner) {
		if api.opts.OIDC.Enabled() {
			return errorf(http.StatusForbidden, "", "Password sign-in is disabled on this deployment; sign in with %s", api.opts.OIDC.SignInText)
		}
		return errorf(http.StatusForbidden, "", "Password sign-in is disabled on this deployment; only owners may sign in with a password")
	}
	// Only now, with the password right, may the answer say the account
	// is suspended.
	if user.Status != database.UserStatusActive {
		return errorf(http.StatusForbidden, "", "Your account is %s; ask an owner to activate it", user.Status)
	}
	token, key, err := api.newAPIKey(ctx, user.ID, loginTypePassword, "", api.opts.SessionDuration)
	if err != nil {
		return err
	}
	e.actor(user).resource(user.ID, user.Username).field("key_id", key.ID)
	api.setSessionCookie(c, token, int(api.opts.SessionDuration.Seconds()))
	c.JSON(http.StatusCreated, codersdk.LoginWithPasswordResponse{SessionToken: token})
	return nil
}

func (api *API) postLogout(c *gin.Context) error {
	key := c.MustGet(ctxAPIKey).(database.APIKey)
	e := api.audit(c, codersdk.AuditActionLogout, codersdk.AuditResourceUser).resource(key.UserID, actor(c).Username).field("key_id", key.ID)
	err := e.inTx(c.Request.Context(), http.StatusOK, func(tx *database.DB) error {
		if err := tx.DeleteAPIKey(c.Request.Context(), key.UserID, key.ID); err != nil && !errors.Is(err, database.ErrNotFound) {
			return err
		}
		return nil
	})
	api.authChanged() // here at once; other replicas hear the trigger's notification
	if err != nil {
		return err
	}
	api.setSessionCookie(c, "", -1)
	c.JSON(http.StatusOK, codersdk.Response{Message: "Logged out"})
	return nil
}

// userParam resolves the :user path parameter: "me", a username or an id.
func (api *API) userParam(c *gin.Context) (database.User, error) {
	p := c.Param("user")
	me := actor(c)
	if p == codersdk.Me || p == me.ID || strings.EqualFold(p, me.Username) {
		return me, nil
	}
	// Who cannot read other users cannot learn whether one exists either.
	if !can(me, resUser, actRead, "") {
		return database.User{}, forbidden()
	}
	ctx := c.Request.Context()
	u, err := api.db.UserByID(ctx, p)
	if errors.Is(err, database.ErrNotFound) {
		u, err = api.db.UserByEmailOrUsername(ctx, "", p)
	}
	return u, notFoundAs(fmt.Sprintf("User %q", p), err)
}

// userParamFor is userParam followed by the check that the actor may do act
// on res owned by that user (their own tokens, their own profile). As
// workspaceParam, it returns the user it found even when the check fails,
// so that the audit record can name them.
func (api *API) userParamFor(c *gin.Context, res resource, act action) (database.User, error) {
	u, err := api.userParam(c)
	if err != nil {
		return u, err
	}
	return u, authorize(c, res, act, u.ID)
}

func (api *API) user(c *gin.Context) error {
	u, err := api.userParamFor(c, resUser, actRead)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, api.convertUser(u))
	return nil
}

func (api *API) users(c *gin.Context) error {
	if err := authorize(c, resUser, actRead, ""); err != nil {
		return err
	}
	us, err := api.db.Users(c.Request.Context())
	if err != nil {
		return err
	}
	out := codersdk.GetUsersResponse{Users: []codersdk.User{}, Count: len(us)}
	for _, u := range us {
		out.Users = append(out.Users, api.convertUser(u))
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func validateRoles(rs []string) ([]string, error) {
	out := []string{}
	for _, r := range rs {
		if !validRole(r) {
			return nil, validation("roles", fmt.Sprintf("unknown role %q; roles are owner, template-admin, member", r))
		}
		if r != codersdk.RoleMember && !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (api *API) postUser(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceUser)
	if err := authorize(c, resUser, actCreate, ""); err != nil {
		return err
	}
	var req codersdk.CreateUserRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	if err := validateNewUser(req.Email, req.Username, req.Name, req.Password); err != nil {
		return err
	}
	rs, err := validateRoles(req.Roles)
	if err != nil {
		return err
	}
	hash, err := hashPassword(req.Password)
	if err != nil {
		return err
	}
	e.resource("", req.Username).field("email", req.Email).field("roles", rs)
	var u database.User
	err = e.inTx(c.Request.Context(), http.StatusCreated, func(tx *database.DB) error {
		var err error
		u, err = tx.InsertUser(c.Request.Context(), database.InsertUserParams{Email: req.Email, Username: req.Username, Name: req.Name, HashedPassword: hash, Roles: rs})
		e.resource(u.ID, "")
		return err
	})
	if errors.Is(err, database.ErrConflict) {
		return conflict("A user with email %q or username %q already exists", req.Email, req.Username)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, api.convertUser(u))
	return nil
}

func (api *API) putUserRoles(c *gin.Context) error {
	e, u, err := api.auditUser(c, codersdk.AuditActionWrite)
	e.field("previous_roles", u.Roles)
	if err != nil {
		return err
	}
	if err := authorize(c, resUser, actUpdate, ""); err != nil {
		return err
	}
	var req codersdk.UpdateRoles
	if err := decode(c, &req); err != nil {
		return err
	}
	rs, err := validateRoles(req.Roles)
	if err != nil {
		return err
	}
	if u.ID == actor(c).ID && !slices.Contains(rs, codersdk.RoleOwner) {
		return badRequest("You cannot remove your own owner role")
	}
	e.field("roles", rs)
	err = e.inTx(c.Request.Context(), http.StatusOK, func(tx *database.DB) error {
		u, err = tx.UpdateUserRoles(c.Request.Context(), u.ID, rs)
		return err
	})
	api.authChanged() // here at once; other replicas hear the trigger's notification
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, api.convertUser(u))
	return nil
}

// putUserProfile changes a user's username and full name: the user's own,
// or anyone's for owners.
func (api *API) putUserProfile(c *gin.Context) error {
	e, u, err := api.auditUser(c, codersdk.AuditActionWrite)
	if err != nil {
		return err
	}
	if err := authorize(c, resUser, actUpdate, u.ID); err != nil {
		return err
	}
	var req codersdk.UpdateUserProfileRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	username := req.Username
	if username == "" {
		username = u.Username
	}
	if err := validateUsername(username); err != nil {
		return err
	}
	if err := validateName(req.Name); err != nil {
		return err
	}
	e.field("username", username).field("previous_username", u.Username).field("name", req.Name).field("previous_name", u.Name)
	err = e.inTx(c.Request.Context(), http.StatusOK, func(tx *database.DB) error {
		u, err = tx.UpdateUserProfile(c.Request.Context(), u.ID, username, req.Name)
		return err
	})
	if errors.Is(err, database.ErrConflict) {
		return conflict("A user named %q already exists", username)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, api.convertUser(u))
	return nil
}

// gitSSHKey answers a user's SSH public key, generating the pair on first
// use; the private key only ever goes to that user's builds.
func (api *API) gitSSHKey(c *gin.Context) error {
	u, err := api.userParamFor(c, resUser, actRead)
	if err != nil {
		return err
	}
	k, err := api.db.SSHKeyByUser(c.Request.Context(), u.ID, generateSSHKey)
	if err != nil {
		return err
	}
	c.JSON(http.StatusOK, codersdk.GitSSHKey{UserID: k.UserID, CreatedAt: k.CreatedAt, UpdatedAt: k.UpdatedAt, PublicKey: k.PublicKey})
	return nil
}

func convertAPIKey(k database.APIKey) codersdk.APIKey {
	return codersdk.APIKey{ID: k.ID, UserID: k.UserID, LastUsed: k.LastUsed, ExpiresAt: k.ExpiresAt, CreatedAt: k.CreatedAt,
		LoginType: k.LoginType, TokenName: k.TokenName, LifetimeSeconds: k.LifetimeSeconds}
}

func (api *API) postToken(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionCreate, codersdk.AuditResourceAPIKey).field("user", c.Param("user"))
	u, err := api.userParamFor(c, resAPIKey, actCreate)
	if err != nil {
		return err
	}
	var req codersdk.CreateTokenRequest
	if err := decode(c, &req); err != nil {
		return err
	}
	lifetime := req.Lifetime
	switch {
	case lifetime == 0:
		lifetime = 30 * 24 * time.Hour
	case lifetime < time.Second:
		return validation("lifetime", "must be at least one second (the value is in nanoseconds)")
	case lifetime > api.opts.MaxTokenLifetime:
		return validation("lifetime", fmt.Sprintf("must be at most %s", api.opts.MaxTokenLifetime))
	}
	name := strings.TrimSpace(req.TokenName)
	if name == "" {
		name = "token-" + randomString(8)
	}
	e.resource("", name).field("user", u.Username).field("lifetime", lifetime.String())
	token, key, err := api.newAPIKey(c.Request.Context(), u.ID, loginTypeToken, name, lifetime)
	e.resource(key.ID, "")
	if errors.Is(err, database.ErrConflict) {
		return conflict("A token named %q already exists", name)
	}
	if err != nil {
		return err
	}
	c.JSON(http.StatusCreated, codersdk.GenerateAPIKeyResponse{Key: token})
	return nil
}

func (api *API) tokens(c *gin.Context) error {
	u, err := api.userParamFor(c, resAPIKey, actRead)
	if err != nil {
		return err
	}
	keys, err := api.db.APIKeysByUser(c.Request.Context(), u.ID, loginTypeToken)
	if err != nil {
		return err
	}
	out := []codersdk.APIKey{}
	for _, k := range keys {
		out = append(out, convertAPIKey(k))
	}
	c.JSON(http.StatusOK, out)
	return nil
}

func (api *API) deleteAPIKey(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionDelete, codersdk.AuditResourceAPIKey).resource(c.Param("key"), "").field("user", c.Param("user"))
	u, err := api.userParam(c)
	if err != nil {
		return err
	}
	e.field("user", u.Username)
	if err := authorize(c, resAPIKey, actDelete, u.ID); err != nil {
		return err
	}
	err = e.inTx(c.Request.Context(), http.StatusNoContent, func(tx *database.DB) error {
		return tx.DeleteAPIKey(c.Request.Context(), u.ID, c.Param("key"))
	})
	api.authChanged() // here at once; other replicas hear the trigger's notification
	if err != nil {
		return notFoundAs("API key", err)
	}
	c.Status(http.StatusNoContent)
	return nil
}

// postLogoutAll ends every session of a user and deletes its API tokens
// (an owner's answer to a stolen laptop or a departure; a user may do it
// to itself).
func (api *API) postLogoutAll(c *gin.Context) error {
	e := api.audit(c, codersdk.AuditActionDelete, codersdk.AuditResourceAPIKey).field("user", c.Param("user")).field("all", true)
	u, err := api.userParam(c)
	if err != nil {
		return err
	}
	e.resource(u.ID, u.Username).field("user", u.Username)
	if err := authorize(c, resAPIKey, actDelete, u.ID); err != nil {
		return err
	}
	err = e.inTx(c.Request.Context(), http.StatusNoContent, func(tx *database.DB) error {
		n, err := tx.DeleteAPIKeysByUser(c.Request.Context(), u.ID)
		e.field("keys_deleted", n)
		return err
	})
	api.authChanged() // here at once; other replicas hear the trigger's notification
	if err != nil {
		return err
	}
	c.Status(http.StatusNoContent)
	return nil
}

func (api *API) convertOrg() codersdk.Organization {
	return codersdk.Organization{ID: api.org.ID, Name: api.org.Name, DisplayName: api.org.DisplayName, IsDefault: true, CreatedAt: api.org.CreatedAt}
}

// orgParam checks the :org path parameter names the default organization.
func (api *API) orgParam(c *gin.Context) error {
	switch c.Param("org") {
	case "default", api.org.ID, api.org.Name:
		return nil
	}
	return notFound(fmt.Sprintf("Organization %q", c.Param("org")))
}

func (api *API) organizations(c *gin.Context) error {
	c.JSON(http.StatusOK, []codersdk.Organization{api.convertOrg()})
	return nil
}

func (api *API) organization(c *gin.Context) error {
	if err := api.orgParam(c); err != nil {
		return err
	}
	c.JSON(http.StatusOK, api.convertOrg())
	return nil
}
