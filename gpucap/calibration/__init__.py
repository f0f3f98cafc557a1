"""Measured runs in, fitted coefficients out: result-file readers, load-test cases, validation against measurements, the fit, error tables and ranges."""
