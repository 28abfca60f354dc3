"""The file backend: every tier of every agent under one data directory (the embedded
default). `stores.files.backend.FileBackend` builds them all."""
