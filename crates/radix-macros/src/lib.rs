//! `#[derive(Module)]`: implements `radix::Module` for a struct by visiting
//! its fields in declaration order, each under its name (tuple structs: its
//! index). Fields marked `#[module(skip)]` are not visited; fields of plain
//! types (numbers, `String`, ...) visit nothing by themselves.

use proc_macro::TokenStream;
use quote::quote;
use syn::{Data, DeriveInput, Fields, Index, parse_macro_input};

/// Derives `radix::Module` for a struct (see the crate docs).
#[proc_macro_derive(Module, attributes(module))]
pub fn derive_module(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(ts) => ts.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(input: &DeriveInput) -> syn::Result<proc_macro2::TokenStream> {
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(
            &input.ident,
            "#[derive(Module)] supports structs only",
        ));
    };
    let mut visits = vec![];
    let mut visits_mut = vec![];
    let fields: Vec<_> = match &data.fields {
        Fields::Named(f) => f.named.iter().collect(),
        Fields::Unnamed(f) => f.unnamed.iter().collect(),
        Fields::Unit => vec![],
    };
    for (i, field) in fields.iter().enumerate() {
        if is_skipped(field)? {
            continue;
        }
        let (access, name) = match &field.ident {
            Some(id) => (quote!(#id), id.to_string()),
            None => {
                let idx = Index::from(i);
                (quote!(#idx), i.to_string())
            }
        };
        visits.push(quote! {
            ::radix::module::with_field(path, #name, |p| ::radix::Module::visit(&self.#access, p, f));
        });
        visits_mut.push(quote! {
            ::radix::module::with_field(path, #name, |p| ::radix::Module::visit_mut(&mut self.#access, p, f));
        });
    }
    let ident = &input.ident;
    let (impl_g, ty_g, where_g) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_g ::radix::Module for #ident #ty_g #where_g {
            fn visit(&self, path: &mut ::std::string::String, f: &mut dyn FnMut(&str, &::radix::Tensor)) {
                #(#visits)*
            }
            fn visit_mut(&mut self, path: &mut ::std::string::String, f: &mut dyn FnMut(&str, &mut ::radix::Tensor)) {
                #(#visits_mut)*
            }
        }
    })
}

fn is_skipped(field: &syn::Field) -> syn::Result<bool> {
    let mut skip = false;
    for attr in &field.attrs {
        if attr.path().is_ident("module") {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("skip") {
                    skip = true;
                    Ok(())
                } else {
                    Err(meta.error("expected `skip`"))
                }
            })?;
        }
    }
    Ok(skip)
}
