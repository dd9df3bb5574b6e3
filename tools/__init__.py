"""Scripts that run the project (make report) and check it; not part of the d2l_extras package."""
