"""The login-node half: parse the launch, run the pre-flight, submit."""
