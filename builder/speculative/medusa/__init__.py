"""medusa."""
