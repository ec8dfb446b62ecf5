package database

// WorkspaceProxyColumns are the columns the workspace proxy queries read,
// for the test that compares them with the table.
const WorkspaceProxyColumns = workspaceProxyColumns
