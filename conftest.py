"""Root conftest: every test gets gpudra's shared fixtures (see gpudra_testing.pytest_plugin)."""

pytest_plugins = ["gpudra_testing.pytest_plugin"]
