"""The `dreamkeeper` command line: `main` parses and runs, each other module is one
command group registering its own commands (`register(subparsers)`) beside their handlers."""
