"""Talking to Temporal from anywhere: the connection (with the payload codec), the
search attributes every workflow carries, and what a task queue's store claim says.
Imports only the core — an agent process uses it without loading any workflow,
activity or worker code."""
