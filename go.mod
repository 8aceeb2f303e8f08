module github.com/cove-sandbox/cove

go 1.26.8

require github.com/hashicorp/yamux v0.1.2
