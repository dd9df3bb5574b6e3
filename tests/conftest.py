"""Shared test set-up: a headless matplotlib backend, and a profile the tests control."""
import matplotlib

matplotlib.use("Agg")
