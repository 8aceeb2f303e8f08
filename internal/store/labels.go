package store

// Meta is what a caller tells about a sandbox beyond its resources: its
// labels and the user its commands run as by default. A snapshot saved
// from a sandbox keeps its sandbox's, for the children to inherit.
type Meta struct {
	LabelsJSON string // labels (a JSON object of strings); "" for none
	User       string // default user of exec and file calls; "": root
	// EnvJSON (a JSON array of KEY=VALUE) and Cwd are the environment and
	// working directory every process started in the sandbox gets unless
	// its call gives its own; "" for none.
	EnvJSON string
	Cwd     string
}

// metaMigrations add Meta's columns to a database made before them; each
// fails harmlessly ("duplicate column") once applied.
var metaMigrations = []string{
	`ALTER TABLE sandboxes ADD COLUMN labels TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandboxes ADD COLUMN user TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN labels TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN user TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandboxes ADD COLUMN env TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE sandboxes ADD COLUMN cwd TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN env TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE snapshots ADD COLUMN cwd TEXT NOT NULL DEFAULT ''`,
}
