<?php
undefined_function_here();
