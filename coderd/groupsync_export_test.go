package coderd

// The OIDC group sync, for its tests in package coderd_test (which may
// import coderdtest; this package may not).
var SyncOIDCGroups = (*API).syncOIDCGroups
