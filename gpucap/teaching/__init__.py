"""The theory notebook's helpers, and the seed articles' own formulas reproduced for comparison."""
