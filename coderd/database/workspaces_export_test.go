package database

// WorkspacePageQuery is the query of the ids of a page of the workspace
// list and its arguments, for the test that reads its plan.
func WorkspacePageQuery(f WorkspaceFilter) (string, []any) {
	where, args := f.where()
	return f.page(where), args
}
