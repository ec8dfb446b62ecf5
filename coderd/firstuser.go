package coderd

import "context"

// runFirstUserHook runs the OnFirstUser hook in the background. It is
// counted as running from before the first user's creation is answered
// until the hook returns, and /api/v2/buildinfo reports templates_importing
// meanwhile: a client that logs in as the first user and at once asks for
// a template the hook is still importing (the appliance's bundled
// templates) learns that it should wait rather than fail. The count lives
// in this replica's memory, like the hook itself.
func (api *API) runFirstUserHook(ctx context.Context, username, token string) {
	api.firstUserHooks.Add(1)
	go func() {
		defer api.firstUserHooks.Add(-1)
		api.opts.OnFirstUser(ctx, username, token)
	}()
}
