"""The dependency-free core: the entry model, limits and validation, the error tree, the
settings, and every workflow and activity input and result. Everything else imports it;
it imports no other Dreamkeeper layer and nothing of Temporal."""
