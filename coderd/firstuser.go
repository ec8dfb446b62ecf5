package coderd

// runFirstUserHook runs the OnFirstUser hook in the background, on a
// context the API owns: Run cancels it when it ends and waits for the hook
// to return, so a shutdown (or a start-up that fails after serving) never
// leaves a template push running behind it. It is counted as running from
// before the first user's creation is answered until the hook returns, and
// /api/v2/buildinfo reports templates_importing meanwhile: a client that
// logs in as the first user and at once asks for a template the hook is
// still importing (the appliance's bundled templates) learns that it should
// wait rather than fail. The count lives in this replica's memory, like the
// hook itself.
func (api *API) runFirstUserHook(username, token string) {
	api.firstUserHooks.Add(1)
	api.hooks.Add(1)
	go func() {
		defer api.hooks.Done()
		defer api.firstUserHooks.Add(-1)
		api.opts.OnFirstUser(api.hooksCtx, username, token)
	}()
}
