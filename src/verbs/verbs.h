/* Placeholder: being written. */
