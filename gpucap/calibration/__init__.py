"""Measured runs in, fitted coefficients out: result-file readers, load-test cases, validation against measurements, the fit, error tables and ranges."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.calibration.analysis import error_tables as error_tables
    from gpucap.calibration.analysis import leave_one_model_out as leave_one_model_out
    from gpucap.calibration.analysis import lomo_summary as lomo_summary
    from gpucap.calibration.analysis import size_bucket as size_bucket
    from gpucap.calibration.analysis import wide_error_table as wide_error_table
    from gpucap.calibration.fitresult import CoefficientRecord as CoefficientRecord
    from gpucap.calibration.fitresult import FitResult as FitResult
    from gpucap.calibration.history import append_history as append_history
    from gpucap.calibration.history import calibration_history as calibration_history
    from gpucap.calibration.history import what_changed as what_changed
    from gpucap.calibration.limits import check_limit_slo as check_limit_slo
    from gpucap.calibration.limits import find_sweeps as find_sweeps
    from gpucap.calibration.limits import sweep_table as sweep_table
    from gpucap.calibration.loadtests import cases_from_runs as cases_from_runs
    from gpucap.calibration.physical import read_physical_ranges as read_physical_ranges
    from gpucap.calibration.promptsteps import calibrate_with_prompt_steps as calibrate_with_prompt_steps
    from gpucap.calibration.results import read_results as read_results
    from gpucap.calibration.settings import FitSettings as FitSettings
    from gpucap.calibration.stepfit import fit_steps as fit_steps
    from gpucap.calibration.telemetryfit import fit_telemetry as fit_telemetry
    from gpucap.calibration.telemetryfit import prior_from_history as prior_from_history
    from gpucap.calibration.telemetryfit import window_targets as window_targets
    from gpucap.calibration.validate import case_hardware as case_hardware
    from gpucap.calibration.validate import read_cases as read_cases
    from gpucap.calibration.validate import synthetic_cases as synthetic_cases

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
