"""The theory notebook's helpers, and the seed articles' own formulas reproduced for comparison."""

from typing import TYPE_CHECKING

from gpucap.lazy import public_names

if TYPE_CHECKING:
    from gpucap.teaching import seeds as seeds
    from gpucap.teaching import walkthrough as walkthrough
    from gpucap.teaching.sensitivity import SEED1_MEASURED as SEED1_MEASURED
    from gpucap.teaching.sensitivity import against_band as against_band
    from gpucap.teaching.sensitivity import band_figure as band_figure
    from gpucap.teaching.sensitivity import what_moves as what_moves

__getattr__, __dir__, __all__ = public_names(__name__, __file__)
