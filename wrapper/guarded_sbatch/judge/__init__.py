"""The pure decision core: a verdict from the metric history alone."""
