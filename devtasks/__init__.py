"""Developer tasks (`invoke test`, the GPU lane's pack): tasks.py adds them from a checkout; the installed
sparkgate package and its images carry none of them."""
