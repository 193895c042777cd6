"""Readers of a run's metrics: TensorBoard, W&B, MLflow, CSV and text logs."""
