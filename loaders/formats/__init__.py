"""Readers of file formats several loaders share (TFRecord, tf.Example, TFDS features, images, npz)."""
