"""Text and figures of results; no physics. Each function takes an object with the attributes it reads."""
