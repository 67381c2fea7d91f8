"""The model catalog (models.toml): one TOML file naming every model one
server serves, read the same way by the launcher (server/), which exports
and serves its models, and by the gateway, which serves them by name; and
what else the two share (the declaration of the tasks, the trace options).
Standard library only, like the launcher."""
