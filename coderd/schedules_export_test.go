package coderd

// TrackSession is trackSession for tests: what the relay calls when a
// session to agentID opens (the returned func closes it).
func (api *API) TrackSession(agentID string) func() { return api.trackSession(agentID) }
